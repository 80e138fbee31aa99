"""The errors of a worker pool: a broken or closed pool, stuck ranks, a rank's first error."""

from __future__ import annotations

from enum import Enum
from typing import Any

from ..protocol import TaskReply
from ..states import Fate, TaskState
from .dashboards import StopFlag
from .errors import RankFate, WorkerError, build_error, root_cause
from .stalls import Finding
from .watch import where_note
from .wheretable import WhereTable

__all__ = [
    "RESTARTED",
    "PoolBrokenError",
    "PoolClosedError",
    "RankDied",
    "RanksStuck",
    "StuckReason",
    "TaskTimeoutError",
    "add_note",
    "broken_problem",
    "died_error",
    "first_error",
    "interrupted_error",
    "quiet",
    "raise_first_error",
    "restart_failed",
    "stuck_error",
    "stuck_message",
    "task_states",
]


class StuckReason(Enum):
    """Why a call stopped waiting for ranks (:class:`RanksStuck`); the value is how the
    exception's message says it."""

    PEER_FAILED = "a peer failed"  # no answer within grace_period of another rank's failure
    INTERRUPTED = "interrupted"  # no answer within grace_period of the interrupt
    INTERRUPTED_TWICE = "interrupted twice"  # a second interrupt: stop waiting at once
    TIMEOUT = "timeout"  # the call ran past the pool's timeout
    STALL = "stall"  # a collective stalled, with on_stall="raise"


_AFTER = {
    StuckReason.PEER_FAILED: " after another rank failed",
    StuckReason.INTERRUPTED: " after the interrupt",
}


RESTARTED = (
    "The pool restarted its process group: every rank's namespace was lost (variables, "
    "models, the Accelerator); run the cells that set them up again."
)


def restart_failed(exc: BaseException) -> str:
    """What the user is told when the pool could not restart its group."""
    return (
        f"The pool tried to restart its process group and failed ({exc}); it is broken: call "
        "pool.restart()."
    )


def broken_problem(error: BaseException) -> str:
    """Why a pool whose rank died refuses work."""
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    return (
        f"the pool is broken: {first}. Call pool.restart() to start new workers (every "
        "namespace is lost), or pool.shutdown()."
    )


class RankDied(Exception):
    """A worker of the generation ended (its fate says how); the generation is unusable."""

    def __init__(self, error: BaseException, fates: list[RankFate]) -> None:
        super().__init__(str(error))
        self.error = error
        self.fates = fates


class RanksStuck(Exception):
    """Ranks did not answer within the grace period (or the call's timeout), or waited in a
    collective that stalled (``reason`` ``StuckReason.STALL``, with ``on_stall="raise"``)."""

    def __init__(
        self,
        ranks: list[int],
        replies: dict[int, TaskReply],
        reason: StuckReason,
        stalled: tuple[Finding, WhereTable] | None = None,
    ) -> None:
        super().__init__(f"rank(s) {ranks} did not finish ({reason.value})")
        self.ranks = ranks
        self.replies = replies
        self.reason = reason
        self.stalled = stalled


class PoolBrokenError(RuntimeError):
    """A rank of the pool died; the pool refuses work until ``restart()``."""


class PoolClosedError(RuntimeError):
    """The pool was shut down."""


class TaskTimeoutError(TimeoutError):
    """A task ran past the pool's ``timeout``; the pool restarted its group."""


def first_error(
    replies: dict[int, TaskReply], hosts: dict[int, str] | None = None
) -> BaseException | None:
    """The first failing rank's own exception (with every rank's fate), or None; ``hosts``:
    the machine of each rank of a pool on other machines."""
    hosts = hosts or {}
    fates = [
        RankFate(
            r,
            r,
            state=Fate.RAISED if rep.error else Fate.RETURNED,
            error=rep.error,
            host=hosts.get(r, ""),
        )
        for r, rep in sorted(replies.items())
    ]
    for fate in fates:
        fate.when = fate.error.when if fate.error is not None else None
    cause = root_cause(fates)
    return build_error(cause, fates) if cause is not None else None


def raise_first_error(replies: dict[int, TaskReply], hosts: dict[int, str] | None = None) -> None:
    error = first_error(replies, hosts)
    if error is not None:
        raise error


def quiet(error: BaseException) -> BaseException:
    """``error`` with the supervisor's own exception hidden from its traceback."""
    error.__suppress_context__ = True
    return error


def add_note(error: BaseException, text: str) -> None:
    """Add ``text`` to the message of the rank's :class:`WorkerError` (``error`` itself or its
    cause), which every traceback display shows (IPython before 8.14 shows no notes)."""
    target = error if isinstance(error, WorkerError) else error.__cause__
    if isinstance(target, WorkerError):
        target.args = (f"{target.args[0]}\n\n{text.rstrip()}",)
    elif hasattr(error, "add_note"):
        error.add_note(text)


def stuck_message(
    ranks: list[int], label: str, limit: float | None, reason: StuckReason, where: WhereTable
) -> str:
    """Which ranks did not finish the task ``label`` within ``limit`` seconds (the timeout,
    else the grace period), on which line, and the where table of every rank."""
    limit_text = f"timeout={limit}s" if reason is StuckReason.TIMEOUT else f"grace_period={limit}s"
    rows = {row["rank"]: row for row in where}
    lines = "\n".join(f"  {_at(r, rows.get(r))}" for r in ranks)
    return (
        f"rank(s) {ranks} did not finish {label} within {limit_text}{_AFTER.get(reason, '')}; "
        f"they were at:\n{lines}\nWhere every rank was:\n{where.text(indent='  ')}\n"
    )


def _at(rank: int, row: dict[str, Any] | None) -> str:
    """``rank 0: In [5], line 5, in <module>: dist.all_reduce(t)``."""
    if row is None or not row.get("where"):
        return f"rank {rank}: {row['state'] if row else 'no answer'}"
    source = f": {row['source']}" if row.get("source") else ""
    return f"rank {rank}: {row['where']}, in {row['function']}{source}"


def died_error(
    error: BaseException, problem: str, left: WhereTable | None, findings: list[Finding]
) -> BaseException:
    """The error of a call during which a rank died: ``problem`` (the pool is broken), what
    went wrong (``findings``) and where the other ranks were (``left``) added to it."""
    add_note(error, problem)
    note = where_note(left, "when it died", findings)
    if note:
        add_note(error, note)
    return quiet(error)


def interrupted_error(label: str, stop: StopFlag | None) -> KeyboardInterrupt:
    """A call interrupted on every rank (by the dashboard's Stop when ``stop`` is set: it is
    cleared for the next call)."""
    how = "stopped (the dashboard's Stop)" if stop is not None and stop.is_set() else "interrupted"
    if stop is not None:
        stop.clear()
    return KeyboardInterrupt(
        f"{label} was {how} on every rank; the pool is up and every namespace is kept."
    )


def task_states(replies: dict[int, TaskReply], interrupted: bool) -> dict[int, TaskState]:
    """Each rank's state after a call: idle, failed, or interrupted."""
    return {
        rank: TaskState.INTERRUPTED
        if interrupted
        else TaskState.FAILED
        if reply.error
        else TaskState.IDLE
        for rank, reply in replies.items()
    }


def stuck_error(
    reason: StuckReason,
    text: str,
    replies: dict[int, TaskReply],
    hosts: dict[int, str] | None = None,
) -> BaseException:
    """The exception a call raises when ranks were stuck (``text`` says where and what was
    lost): the failed rank's own error, a :class:`TaskTimeoutError` or a KeyboardInterrupt."""
    if reason is StuckReason.PEER_FAILED:
        error = first_error(replies, hosts)
        if error is not None:
            add_note(error, text)
            return error
    if reason is StuckReason.TIMEOUT:
        return TaskTimeoutError(text)
    return KeyboardInterrupt(text)
