"""Worker failures: what each rank did, which rank failed first, and the error the cell raises."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

from ..location import CollectiveCall
from ..remote import RemoteException
from ..states import Fate

__all__ = [
    "HostError",
    "LaunchStopped",
    "LaunchTimeoutError",
    "RankFate",
    "StallError",
    "WorkerError",
    "build_error",
    "ended_fate",
    "format_fates",
    "root_cause",
]


@dataclass
class RankFate:
    """What became of one rank.

    ``state`` is a :class:`Fate` (its members say what each means).
    """

    rank: int
    local_rank: int
    state: Fate = Fate.RUNNING
    exit_code: int | None = None
    error: RemoteException | None = None
    when: float | None = None
    host: str = ""  # the hosts= entry of the machine the rank ran on; empty: this machine
    collective: CollectiveCall | None = None  # the collective it ended in (its note page)

    @property
    def where(self) -> str:
        """``"rank 2"``, or ``"rank 2 on node2"`` for a rank on another machine."""
        return f"rank {self.rank} on {self.host}" if self.host else f"rank {self.rank}"

    @property
    def signal_name(self) -> str | None:
        """The signal that ended the process, if one did."""
        if self.exit_code is None or self.exit_code >= 0:
            return None
        try:
            return signal.Signals(-self.exit_code).name
        except ValueError:
            return f"signal {-self.exit_code}"

    @property
    def failed(self) -> bool:
        """True when this rank failed by itself (not stopped by the launcher)."""
        return self.state.failed

    def describe(self) -> str:
        """One line for the fate table."""
        if self.state == Fate.RETURNED:
            return "returned"
        if self.state == Fate.RAISED and self.error is not None:
            first = self.error.message.splitlines()[0] if self.error.message else ""
            return f"raised {self.error.type_name}: {first}"[:160]
        if self.state == Fate.SIGNALLED:
            hint = " (out of memory?)" if self.signal_name == "SIGKILL" else ""
            return f"killed by {self.signal_name}{hint}{self._inside()}"
        if self.state == Fate.EXITED:
            return f"exited with code {self.exit_code}{self._inside()}"
        if self.state == Fate.STOPPED:
            return "stopped by the launcher after another rank failed"
        return str(self.state)

    def _inside(self) -> str:
        """`` inside all_gather #3 on world with float32[3, 5]``, where its note says so."""
        call = self.collective
        if call is None:
            return ""
        queued = " (queued, async_op=True)" if call.queued else ""
        tensors = f" with {call.tensors}" if call.tensors else ""
        return f" inside {call.op} #{call.seq} on {call.group}{tensors}{queued}"


def ended_fate(exit_code: int | None, error: RemoteException | None = None) -> Fate:
    """The fate of a rank that ended by itself: ``raised`` when its exception came (``error``),
    else ``signalled`` for a negative exit code (a signal the launcher did not send), else
    ``exited``. The one rule of a launch's ranks and a pool's."""
    if error is not None:
        return Fate.RAISED
    return Fate.SIGNALLED if (exit_code or 0) < 0 else Fate.EXITED


def format_fates(fates: list[RankFate]) -> str:
    """A table with one line per rank."""
    return "\n".join(
        f"  rank {f.rank:>3} ({f'{f.host}, ' if f.host else ''}local {f.local_rank}): "
        f"{f.describe()}"
        for f in fates
    )


def root_cause(fates: list[RankFate]) -> RankFate | None:
    """The rank that failed first; failures that read as a peer's death come last."""
    failed = [f for f in fates if f.failed]
    if not failed:
        return None

    def key(fate: RankFate) -> tuple[int, float, int]:
        symptom = fate.error is not None and fate.error.looks_like_peer_loss
        return (
            1 if symptom else 0,
            fate.when if fate.when is not None else float("inf"),
            fate.rank,
        )

    return min(failed, key=key)


class WorkerError(RuntimeError):
    """A launched rank failed.

    Attributes:
        rank: global rank that failed first.
        local_rank: its index on this machine.
        type_name: the exception's type name, or the signal / exit code.
        message: the exception's message.
        remote_traceback: the traceback as formatted in the worker.
        fates: what became of every rank on this machine (of every machine for ``hosts=``).
        host: the machine of the failed rank (``hosts=``), else empty.
    """

    def __init__(
        self,
        rank: int,
        local_rank: int,
        type_name: str,
        message: str,
        remote_traceback: str = "",
        fates: list[RankFate] | None = None,
        host: str = "",
    ) -> None:
        self.rank = rank
        self.host = host
        self.local_rank = local_rank
        self.type_name = type_name
        self.message = message
        self.remote_traceback = remote_traceback
        self.fates = list(fates or [])
        super().__init__(self._text())

    def _text(self) -> str:
        where = f"rank {self.rank} on {self.host}" if self.host else f"rank {self.rank}"
        lines = [f"{where} failed: {self.type_name}: {self.message}"]
        if self.remote_traceback:
            lines += ["", f"Traceback on {where}:", self.remote_traceback.rstrip()]
        if self.fates:
            scope = "Every rank" if self.host else "Every rank on this machine"
            lines += ["", f"{scope}:", format_fates(self.fates)]
        return "\n".join(lines)

    def __reduce__(self) -> tuple[Any, ...]:
        args = (self.rank, self.local_rank, self.type_name, self.message, self.remote_traceback)
        return (type(self), (*args, self.fates, self.host))


class LaunchTimeoutError(WorkerError, TimeoutError):
    """Ranks were still running when the launcher's ``timeout`` ran out."""


class LaunchStopped(KeyboardInterrupt):
    """The launch was stopped on request (the dashboard's Stop button, ``stop_requested``).

    Every worker was stopped the way a kernel interrupt stops them (SIGTERM, then SIGKILL)
    before this is raised. Like ``KeyboardInterrupt`` it is not an ``Exception``, so
    ``max_restarts`` does not restart a stopped launch.
    """

    def __init__(
        self, message: str = "the launch was stopped on request; every rank was stopped"
    ) -> None:
        super().__init__(message)


class StallError(TimeoutError):
    """Ranks waited in a collective that could not complete (``on_stall="raise"``): a stall
    past ``stall_timeout``, or a divergence (ranks in different collectives).

    Every rank of the launch was stopped first (a pool restarts its group). The message says
    which ranks were not in the collective, on which line, and shows the where table.

    Attributes:
        kind: ``"stall"`` or ``"divergence"``.
        where: the where table: one dict per rank (``WorkerPool.where()``'s rows).
    """

    def __init__(self, message: str, kind: str = "stall", where: list[Any] | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.where = list(where or [])

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.args[0] if self.args else "", self.kind, self.where))


def build_error(cause: RankFate, fates: list[RankFate]) -> BaseException:
    """The exception the cell raises for ``cause``.

    The original exception is re-created with its own type where possible, with a
    :class:`WorkerError` (rank, remote traceback, fate table) as its ``__cause__``; otherwise
    the :class:`WorkerError` itself.
    """
    if cause.error is not None:
        err = cause.error
        worker_error = WorkerError(
            cause.rank,
            cause.local_rank,
            err.type_name,
            err.message,
            err.traceback,
            fates,
            host=cause.host,
        )
        original = err.rebuild()
        if original is None:
            return worker_error
        original.__cause__ = worker_error
        original.__traceback__ = None
        if hasattr(original, "add_note"):
            original.add_note(f"(raised on {cause.where}; see the WorkerError above)")
        return original
    if cause.state == Fate.SIGNALLED:
        kind, message = str(cause.signal_name), f"{cause.where} was {cause.describe()}"
    else:
        kind, message = "exit", f"{cause.where} {cause.describe()} before returning a result"
    return WorkerError(cause.rank, cause.local_rank, kind, message, "", fates, host=cause.host)


class HostError(RuntimeError):
    """A machine of ``hosts=`` cannot take part (unreachable, other versions, its agent
    failed); nothing was started on any machine, or what was is stopped.

    Attributes:
        host: the ``hosts=`` entry.
    """

    def __init__(self, host: str, message: str) -> None:
        super().__init__(message)
        self.host = host

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.host, str(self)))
