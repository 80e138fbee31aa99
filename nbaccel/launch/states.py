"""The states a rank, a pool task and a pool pass through, as enums.

Each member is also its plain string (``RankState.RUNNING == "running"``), which is what the
events carried before and what the dashboards show, so a person's callbacks that compare with
strings keep working. nbaccel's own code compares members with members, and turns one into text
only where it is shown or written out (``str(state)``); ``tests/unit/test_state_comparisons.py``
has mypy find any comparison with text.

A launched rank has one vocabulary: its :class:`Fate`. What ``RankStateEvent`` announces is
derived from it (:attr:`Fate.announced`, the one table), and so is whether the rank failed by
itself (:attr:`Fate.failed`).
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Fate", "PoolState", "RankKnown", "RankState", "TaskState", "WorkerPhase"]


class _Named(str, Enum):
    """A state whose text is its value: ``f"{state}"`` gives ``running`` and ``repr`` gives
    ``'running'``, as the plain strings did (printed events and status rows read the same)."""

    def __str__(self) -> str:
        return str(self.value)

    def __repr__(self) -> str:
        return repr(self.value)


class RankState(_Named):
    """A launched rank, as ``RankStateEvent`` reports it: running, then how it ended (each
    :class:`Fate` announces one of these: :attr:`Fate.announced`)."""

    RUNNING = "running"
    RETURNED = "returned"
    FAILED = "failed"
    STOPPED = "stopped"


class Fate(_Named):
    """What became of a rank, as the error table shows it (``errors.RankFate``)."""

    RUNNING = "running"
    RETURNED = "returned"
    RAISED = "raised"  # the function raised
    EXITED = "exited"  # non-zero exit code without an exception
    SIGNALLED = "signalled"  # killed by a signal the launcher did not send
    STOPPED = "stopped"  # stopped by the launcher after another rank failed
    TIMED_OUT = "timed out"
    STALLED = "stalled"  # stopped by the launcher: a collective stalled (on_stall="raise")

    @property
    def announced(self) -> RankState:
        """The state ``RankStateEvent`` announces for this fate (``raised``, ``exited`` and
        ``signalled`` read ``failed``; a rank the launcher stopped reads ``stopped``)."""
        return _ANNOUNCED[self]

    @property
    def failed(self) -> bool:
        """True when the rank failed by itself (not stopped by the launcher)."""
        return self.announced is RankState.FAILED


_ANNOUNCED = {
    Fate.RUNNING: RankState.RUNNING,
    Fate.RETURNED: RankState.RETURNED,
    Fate.RAISED: RankState.FAILED,
    Fate.EXITED: RankState.FAILED,
    Fate.SIGNALLED: RankState.FAILED,
    Fate.STOPPED: RankState.STOPPED,
    Fate.TIMED_OUT: RankState.STOPPED,
    Fate.STALLED: RankState.STOPPED,
}


class TaskState(_Named):
    """A pool rank, as ``TaskEvent`` reports it."""

    RUNNING = "running"
    IDLE = "idle"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    DEAD = "dead"  # a broken pool's rank that died
    STOPPED = "stopped"  # a broken pool's rank that was stopped because another died


class PoolState(_Named):
    """A pool, as ``PoolStateEvent`` reports it."""

    STARTING = "starting"
    READY = "ready"
    RUNNING = "running"
    BROKEN = "broken"
    RESTARTING = "restarting"
    CLOSED = "closed"


class RankKnown(_Named):
    """What the notebook knows of a rank better than the rank's own answer to "where are
    you?" (``watch.WhereWatch``): the where table's ``state`` then reads this."""

    EXITED = "exited"  # its process ended
    ELSEWHERE = "elsewhere"  # in a collective with this machine's ranks, run by another launcher


class WorkerPhase(_Named):
    """What a rank's main thread is doing when it says where it is (``location.RankWhere``)."""

    RUNNING = "running"  # the launched function or a pool task runs
    IDLE = "idle"  # a pool rank between tasks
    RETURNED = "returned"  # the launched function returned; the rank waits for the others
    FAILED = "failed"  # the launched function raised; the rank is about to end
