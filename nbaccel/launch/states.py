"""The states a rank, a pool task and a pool pass through, as enums.

Each member is also its plain string (``RankState.RUNNING == "running"``), which is what the
events carried before and what the dashboards show, so callbacks that compare with strings
keep working.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Fate", "PoolState", "RankState", "TaskState", "WorkerPhase"]


class _Named(str, Enum):
    """A state whose text is its value: ``f"{state}"`` gives ``running`` and ``repr`` gives
    ``'running'``, as the plain strings did (printed events and status rows read the same)."""

    def __str__(self) -> str:
        return str(self.value)

    def __repr__(self) -> str:
        return repr(self.value)


class RankState(_Named):
    """A launched rank, as ``RankStateEvent`` reports it: running, then how it ended."""

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


class WorkerPhase(_Named):
    """What a rank's main thread is doing when it says where it is (``location.RankWhere``)."""

    RUNNING = "running"  # the launched function or a pool task runs
    IDLE = "idle"  # a pool rank between tasks
    RETURNED = "returned"  # the launched function returned; the rank waits for the others
    FAILED = "failed"  # the launched function raised; the rank is about to end
