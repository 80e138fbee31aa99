"""The errors of a worker pool: a broken or closed pool, stuck ranks, a rank's first error."""

from __future__ import annotations

from ..protocol import TaskReply
from ..states import Fate
from .errors import RankFate, WorkerError, build_error, root_cause

__all__ = [
    "PoolBrokenError",
    "PoolClosedError",
    "TaskTimeoutError",
    "add_note",
    "first_error",
    "quiet",
    "raise_first_error",
    "stuck_error",
    "stuck_message",
]

_AFTER = {"a peer failed": " after another rank failed", "interrupted": " after the interrupt"}


class PoolBrokenError(RuntimeError):
    """A rank of the pool died; the pool refuses work until ``restart()``."""


class PoolClosedError(RuntimeError):
    """The pool was shut down."""


class TaskTimeoutError(TimeoutError):
    """A task ran past the pool's ``timeout``; the pool restarted its group."""


def first_error(replies: dict[int, TaskReply]) -> BaseException | None:
    fates = [
        RankFate(r, r, state=Fate.RAISED if rep.error else Fate.RETURNED, error=rep.error)
        for r, rep in sorted(replies.items())
    ]
    for fate in fates:
        fate.when = fate.error.when if fate.error is not None else None
    cause = root_cause(fates)
    return build_error(cause, fates) if cause is not None else None


def raise_first_error(replies: dict[int, TaskReply]) -> None:
    error = first_error(replies)
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
    ranks: list[int], label: str, limit: str, reason: str, where: dict[int, str]
) -> str:
    """Which ranks did not finish the task ``label`` within ``limit``, and on which line."""
    lines = "\n".join(f"  rank {r}: {where.get(r, '?').splitlines()[0]}" for r in ranks)
    return (
        f"rank(s) {ranks} did not finish {label} within {limit}{_AFTER.get(reason, '')}; "
        f"they were at:\n{lines}\n"
    )


def stuck_error(reason: str, text: str, replies: dict[int, TaskReply]) -> BaseException:
    """The exception a call raises when ranks were stuck (``text`` says where and what was
    lost): the failed rank's own error, a :class:`TaskTimeoutError` or a KeyboardInterrupt."""
    if reason == "a peer failed":
        error = first_error(replies)
        if error is not None:
            add_note(error, text)
            return error
    if reason == "timeout":
        return TaskTimeoutError(text)
    return KeyboardInterrupt(text)
