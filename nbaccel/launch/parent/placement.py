"""Where the ranks of one launch attempt or pool generation run: the seam every backend fills.

A :class:`Placement` is built for one attempt (a launch) or one generation (a pool) and holds,
before anything starts, all that a group needs to run its ranks: one ``WorkerSpec`` per rank,
the relay and renderer of their output, the ranks' task sender, the supervisor's starter.
Then it starts them in the order its kind of place needs (:meth:`Placement.start`), answers
the group's questions while they run (:meth:`before_wait`, :meth:`lost`, :meth:`host_of`,
:meth:`memory_elsewhere`) and releases what it holds (:meth:`close`). ``LaunchGroup`` and
``PoolGroup`` take any placement alike; ``places.place`` chooses the kind.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from ..config import LaunchConfig
from ..events import EventSink
from ..guard import StartMethod
from ..location import CollectiveCall
from ..nodes.peers import MachineLostError
from ..protocol import WorkerMessage
from ..spec import WorkerMode, WorkerPipes, WorkerSpec
from ..supervision.supervisor import Starter, Supervisor
from .relay import OutputRelay
from .render import CellRenderer
from .stalls import Finding
from .taskpipes import TaskSender
from .wheretable import WhereTable

__all__ = ["PlaceRequest", "Placement", "RankWork"]


@dataclass(frozen=True)
class RankWork:
    """What every rank runs: a launch's function as its one task, or a pool's task loop.

    Attributes:
        mode: ``WorkerMode.LAUNCH`` or ``WorkerMode.POOL``.
        function: a launch's function (None for a pool: its tasks come through the task pipe).
        args: its positional arguments.
        kwargs: its keyword arguments.
    """

    mode: WorkerMode
    function: Callable[..., Any] | None = None
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def spec_fields(self) -> dict[str, Any]:
        """The ``WorkerSpec`` fields this work sets."""
        if self.function is None:
            return {"mode": self.mode}
        return {
            "mode": self.mode,
            "function": self.function,
            "args": self.args,
            "kwargs": self.kwargs,
        }


@dataclass(frozen=True)
class PlaceRequest:
    """What a placement is asked to place: every kind takes the same request.

    Attributes:
        config: the validated settings.
        method: ``"fork"`` or ``"spawn"`` (on other hosts, their agents fork).
        attempt: the launch's attempt or the pool's generation (``restart_count``).
        work: what every rank runs.
        on_event: the owner's ``on_event`` (the renderer draws display events first).
        line_sink: also receives every whole output line (the dashboard).
        streams: where the ranks' stdout and stderr go (default: ``sys.stdout`` / ``stderr``
            as they are at each write).
    """

    config: LaunchConfig
    method: StartMethod
    attempt: int
    work: RankWork
    on_event: EventSink | None = None
    line_sink: Callable[[int, str, str], None] | None = None
    streams: tuple[TextIO, TextIO] | None = None


class Placement(ABC):
    """The ranks of one attempt or generation, placed (see the module docstring).

    Attributes:
        config: the settings, with what the place decided (e.g. the hosts' device).
        specs: one per rank this placement runs, in rank order.
        relay: where their output goes, prefixed, whole lines.
        renderer: draws the display ranks' rich output in the cell; None outside a kernel.
        on_event: the owner's ``on_event`` behind the renderer (display events drawn first).
        pipes: each rank's task pipe (tasks, "where are you?").
        fds: rank -> its descriptors on this machine (none for ranks other machines start).
        remote: the ranks run on other machines (their pids are not this machine's).
    """

    remote = False

    def __init__(
        self,
        config: LaunchConfig,
        specs: list[WorkerSpec],
        relay: OutputRelay,
        renderer: CellRenderer | None,
        on_event: EventSink | None,
        pipes: TaskSender,
        fds: dict[int, WorkerPipes] | None = None,
    ) -> None:
        self.config = config
        self.specs = specs
        self.relay = relay
        self.renderer = renderer
        self.on_event = on_event
        self.pipes = pipes
        self.fds = fds or {}

    @property
    def starter(self) -> Starter | None:
        """How the supervisor starts each rank (None: a child process of this one)."""
        return None

    @property
    def ranks(self) -> list[int]:
        """The global ranks placed here, in order."""
        return [spec.rank for spec in self.specs]

    def supervisor(
        self,
        on_message: Callable[[WorkerMessage], None],
        on_started: Callable[[dict[int, int]], None] | None = None,
    ) -> Supervisor:
        """The supervisor of these ranks, handing each message to ``on_message``."""
        return Supervisor(
            self.specs,
            self.fds,
            on_message,
            keep_out=self.pipes.write_fds,
            on_started=on_started if not self.remote else None,
            starter=self.starter,
        )

    @abstractmethod
    def announce(self, verb: str) -> str:
        """The line printed before the first start (``verb``: "Launching", ...)."""

    @abstractmethod
    def start(self, supervisor: Supervisor) -> None:
        """Start every rank through ``supervisor``, in the order this place needs."""

    def before_wait(self) -> None:
        """Called by the group before each of its waits (nothing to do on this machine)."""
        return None

    def lost(
        self, where: WhereTable | None = None, findings: list[Finding] | tuple[()] = ()
    ) -> MachineLostError | None:
        """The error naming a machine that was lost, or None while none was."""
        return None

    def collective_of(self, rank: int) -> CollectiveCall | None:
        """The collective ``rank`` noted it was in (read once it died; None: none, or not
        noted at this place)."""
        return None

    def host_of(self, rank: int) -> str:
        """The ``hosts=`` entry that runs ``rank`` (empty: this machine)."""
        return ""

    def memory_elsewhere(self) -> dict[int, int]:
        """Rank -> RSS of ranks on other machines (this machine's are read by pid)."""
        return {}

    def drain(self) -> None:
        """Stream every whole line the ranks have written so far."""
        for rank in self.relay.ranks():
            self.relay.drain(rank)

    @abstractmethod
    def close(self) -> None:
        """Release everything this placement holds (the workers are already reaped)."""

    def _flush(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
