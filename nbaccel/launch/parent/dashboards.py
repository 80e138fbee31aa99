"""The dashboard contract, and the seam a dashboard plugs into from above.

``notebook_launcher(dashboard=True)`` and ``WorkerPool(dashboard=True)`` call the factory that a
higher layer registered (``nbaccel`` registers ``nbaccel.widgets``' dashboard), so the launcher
never imports the widgets layer itself. A dashboard is any object with the four members of
:class:`Dashboard` (checked with ``hasattr``, so proxies work; ``line_sink`` may be None); the
hooks that :class:`Board` reads are optional.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from ..config import LaunchConfig
from ..events import EventSink

__all__ = [
    "Board",
    "Dashboard",
    "StopFlag",
    "new_dashboard",
    "open_dashboard",
    "register_dashboard_factory",
]


class Dashboard(Protocol):
    """What every dashboard offers (``docs/widgets.md``)."""

    def begin(self, num_processes: int, first_rank: int = 0) -> None:
        """A launch (or a pool) of ``num_processes`` ranks from ``first_rank`` starts."""

    def chain(self, on_event: EventSink | None) -> EventSink:
        """An ``on_event`` that shows each event, then passes it to ``on_event``."""

    def line_sink(self, local_rank: int, stream: str, line: str) -> None:
        """One whole output line of a rank (``stream``: ``"stdout"`` or ``"stderr"``)."""

    def end(self, error: BaseException | None) -> None:
        """The launch ended (with ``error``, or None when every rank returned)."""


DashboardFactory = Callable[[], Dashboard]
_FACTORY: list[DashboardFactory] = []  # at most one: the latest registered


class StopFlag(Protocol):
    """What a Stop button sets: a ``threading.Event`` or anything with the same two calls."""

    def is_set(self) -> bool: ...

    def clear(self) -> None: ...


@dataclass(frozen=True)
class Board:
    """A dashboard, and the one place that reads its optional hooks (each None where the
    dashboard has none; read when used, so a hook the dashboard sets later is found).

    The hooks: ``stop_requested`` (set by its Stop button: the launch stops as on an
    interrupt), ``set_pids`` (``{global rank: pid}`` once the ranks started: RSS, GPU memory),
    ``on_wait`` (called between the supervisor's waits: a busy kernel reads the Stop click
    there), ``set_machines`` (``node_rank, num_nodes, per_machine, fixed`` of a multi-node
    launch), ``set_hosts`` (``{global rank: host}`` of a launch on ``hosts=``) and
    ``release_messages`` (after a pool call: the kernel messages kept meanwhile).
    """

    dashboard: Dashboard

    def _hook(self, name: str) -> Any:
        return getattr(self.dashboard, name, None)

    @property
    def line_sink(self) -> Callable[[int, str, str], None] | None:
        return cast("Callable[[int, str, str], None] | None", self._hook("line_sink"))

    @property
    def stop_requested(self) -> StopFlag | None:
        flag = self._hook("stop_requested")
        return flag if callable(getattr(flag, "is_set", None)) else None

    @property
    def set_pids(self) -> Callable[[dict[int, int]], None] | None:
        return cast("Callable[[dict[int, int]], None] | None", self._hook("set_pids"))

    @property
    def on_wait(self) -> Callable[[], None] | None:
        return cast("Callable[[], None] | None", self._hook("on_wait"))

    @property
    def set_machines(self) -> Callable[[int, int, int, bool], None] | None:
        return cast("Callable[[int, int, int, bool], None] | None", self._hook("set_machines"))

    @property
    def set_hosts(self) -> Callable[[dict[int, str]], None] | None:
        return cast("Callable[[dict[int, str]], None] | None", self._hook("set_hosts"))

    @property
    def release_messages(self) -> Callable[[], None] | None:
        return cast("Callable[[], None] | None", self._hook("release_messages"))

    def begin(self, config: LaunchConfig) -> None:
        """Tell the dashboard the ranks it shows: every rank of every host (``hosts=``), with
        its host; else this machine's (and, on several machines, where the others are)."""
        shown = self.dashboard
        if config.hosts is not None:
            shown.begin(config.world_size, 0)
            if self.set_hosts is not None:
                per_host = config.num_processes
                self.set_hosts(
                    {r: config.hosts.host_of(r, per_host) for r in range(config.world_size)}
                )
            return
        shown.begin(config.num_processes, config.node_rank * config.num_processes)
        if config.multi_node and self.set_machines is not None:  # the others show their own
            fixed = config.rdzv_backend == "static"
            self.set_machines(config.node_rank, config.num_nodes, config.num_processes, fixed)


def register_dashboard_factory(factory: DashboardFactory) -> None:
    """Make ``factory()`` the dashboard that ``notebook_launcher(dashboard=True)`` feeds."""
    if not callable(factory):
        raise TypeError(f"a dashboard factory must be callable, got {type(factory).__name__}.")
    _FACTORY[:] = [factory]


def new_dashboard() -> Dashboard:
    """A new dashboard from the registered factory."""
    if not _FACTORY:
        raise RuntimeError(
            "notebook_launcher(dashboard=True) found no dashboard: import nbaccel (which "
            "registers nbaccel.widgets' dashboard) or pass a dashboard object."
        )
    return _FACTORY[0]()


def open_dashboard(dashboard: bool | Dashboard | None) -> Board | None:
    """None (no dashboard), or the board to feed: a dashboard given, or a new one for True."""
    if dashboard is None or dashboard is False:
        return None
    if dashboard is True:
        return Board(new_dashboard())  # registered from above (nbaccel/__init__.py)
    if not all(hasattr(dashboard, name) for name in ("begin", "chain", "end", "line_sink")):
        raise TypeError(
            f"dashboard must be True, False, None or a dashboard from nbaccel.widgets (an "
            f"object with begin, chain, line_sink and end), got {type(dashboard).__name__}."
        )
    return Board(dashboard)
