"""The events a worker sends its launcher: rank state changes, progress, metrics, rich output.

Workers call :func:`emit` (or the helpers below); the launcher forwards every event to the
``on_event`` callback given to ``notebook_launcher`` in the notebook's own process, which is
where widgets can be drawn. Outside a launched worker, :func:`emit` does nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from ..state.registry import STATE
from .states import Fate, PoolState, RankState, TaskState

__all__ = [
    "BarEvent",
    "DisplayEvent",
    "EngineEvent",
    "Event",
    "EventSink",
    "MemoryEvent",
    "MetricsEvent",
    "PoolStateEvent",
    "ProgressEvent",
    "RankStateEvent",
    "TaskEvent",
    "emit",
    "report_engine",
    "report_metrics",
    "report_progress",
]


@dataclass(frozen=True)
class Event:
    """Base of every event: which rank sent it and when."""

    rank: int
    time: float = field(default_factory=time.time)


@dataclass(frozen=True)
class RankStateEvent(Event):
    """A rank changed state: ``running`` (sent by the rank), then ``returned``, ``failed`` or
    ``stopped`` (stopped by the launcher after another rank failed), sent by the launcher."""

    state: RankState = RankState.RUNNING
    restart_count: int = 0

    @classmethod
    def of(cls, rank: int, fate: Fate, restart_count: int = 0) -> RankStateEvent:
        """The event that announces a launched rank's ``fate`` (``Fate.announced``: ``raised``
        reads ``failed``)."""
        return cls(rank=rank, state=fate.announced, restart_count=restart_count)


@dataclass(frozen=True)
class TaskEvent(Event):
    """A worker pool's rank changed state: ``running`` a task (``label`` names it: the cell,
    ``In [5]``, or the function), then ``idle``, ``failed`` or ``interrupted``; in a broken
    pool ``dead`` or ``stopped``."""

    state: TaskState = TaskState.IDLE
    label: str = ""
    task_id: int = 0


@dataclass(frozen=True)
class PoolStateEvent(Event):
    """A worker pool changed state (``rank`` is -1): ``ready``, ``running``, ``broken``,
    ``restarting`` or ``closed``; ``message`` says why, where there is a reason."""

    state: PoolState = PoolState.READY
    message: str = ""


@dataclass(frozen=True)
class ProgressEvent(Event):
    """Progress of a loop on a rank (``n`` of ``total`` steps)."""

    n: int = 0
    total: int | None = None
    desc: str = ""


@dataclass(frozen=True)
class MetricsEvent(Event):
    """Scalar metrics logged on a rank at ``step``."""

    values: dict[str, float] = field(default_factory=dict)
    step: int | None = None


@dataclass(frozen=True)
class MemoryEvent(Event):
    """The memory a rank on another machine holds, in bytes: sent every few seconds by the
    agent of its host (``hosts=``), which measures its ranks as the dashboard measures this
    machine's; ``gpu_memory`` is None without a GPU there."""

    rss: int | None = None
    gpu_memory: int | None = None


@dataclass(frozen=True)
class EngineEvent(Event):
    """The training engine a rank's ``Accelerator`` runs, sent when it is created:
    ``engine`` names it (``"deepspeed"``), ``stage`` its ZeRO stage."""

    engine: str = ""
    stage: int | None = None


EventSink: TypeAlias = Callable[[Event], None]
"""What receives a launch's or a pool's events: an ``on_event`` callback."""


def emit(event: Event) -> bool:
    """Send ``event`` to the launcher's parent process. False when not in a launched worker."""
    sink = STATE.event_sink
    if sink is None:
        return False
    sink(event)
    return True


def _rank() -> int:
    process = STATE.process
    return process.process_index if process is not None else STATE.worker_rank


def report_progress(n: int, total: int | None = None, desc: str = "") -> bool:
    """Report loop progress from this rank."""
    return emit(ProgressEvent(rank=_rank(), n=n, total=total, desc=desc))


def report_engine(engine: str, stage: int | None = None) -> bool:
    """Report the training engine this rank's ``Accelerator`` runs."""
    return emit(EngineEvent(rank=_rank(), engine=engine, stage=stage))


def report_metrics(values: dict[str, float], step: int | None = None) -> bool:
    """Report scalar metrics from this rank."""
    clean = {str(k): float(v) for k, v in values.items()}
    return emit(MetricsEvent(rank=_rank(), values=clean, step=step))


@dataclass(frozen=True)
class DisplayEvent(Event):
    """One rich output of a rank: ``display`` (a MIME bundle) or ``clear`` (clear_output).

    ``transient`` carries the worker's own ``display_id``; the parent maps it to one of its
    own, so that ``update=True`` replaces the output shown earlier under that id.
    """

    kind: str = "display"
    data: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    transient: dict[str, Any] = field(default_factory=dict)
    update: bool = False
    wait: bool = False


@dataclass(frozen=True)
class BarEvent(ProgressEvent):
    """The state of one notebook progress bar of a rank (also a :class:`ProgressEvent`).

    ``meter`` is tqdm's text of the bar with ``<bar/>`` where the bar itself goes; ``state``
    is ``open`` or ``closed``.
    """

    bar_id: int = 0
    meter: str = ""
    state: str = "open"
    leave: bool = True
