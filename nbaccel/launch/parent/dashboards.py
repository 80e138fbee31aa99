"""The dashboard contract, and the seam a dashboard plugs into from above.

``notebook_launcher(dashboard=True)`` and ``WorkerPool(dashboard=True)`` call the factory that a
higher layer registered (``nbaccel`` registers ``nbaccel.widgets``' dashboard), so the launcher
never imports the widgets layer itself. A dashboard is any object with the four methods of
:class:`Dashboard`; the hooks of :class:`Board` are optional, and read once, here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["Board", "Dashboard", "new_dashboard", "open_dashboard", "register_dashboard_factory"]


@runtime_checkable
class Dashboard(Protocol):
    """What every dashboard offers (``docs/widgets.md``)."""

    def begin(self, num_processes: int, first_rank: int = 0) -> None:
        """A launch (or a pool) of ``num_processes`` ranks from ``first_rank`` starts."""

    def chain(self, on_event: Callable[[Any], None] | None) -> Callable[[Any], None]:
        """An ``on_event`` that shows each event, then passes it to ``on_event``."""

    def line_sink(self, local_rank: int, stream: str, line: str) -> None:
        """One whole output line of a rank (``stream``: ``"stdout"`` or ``"stderr"``)."""

    def end(self, error: BaseException | None) -> None:
        """The launch ended (with ``error``, or None when every rank returned)."""


DashboardFactory = Callable[[], Dashboard]
_FACTORY: list[DashboardFactory] = []  # at most one: the latest registered


@dataclass(frozen=True)
class Board:
    """A dashboard with its optional hooks, each None where the dashboard has none.

    Attributes:
        dashboard: the dashboard itself.
        stop_requested: set by its Stop button; the launch stops as on an interrupt.
        set_pids: receives ``{global rank: pid}`` once the ranks started (RSS, GPU memory).
        on_wait: called between the supervisor's waits (a busy kernel reads the Stop click).
        set_machines: ``(node_rank, num_nodes, per_machine, fixed)`` of a multi-node launch.
        release_messages: after a pool call, hands back the kernel messages kept meanwhile.
    """

    dashboard: Dashboard
    stop_requested: threading.Event | None
    set_pids: Callable[[dict[int, int]], None] | None
    on_wait: Callable[[], None] | None
    set_machines: Callable[[int, int, int, bool], None] | None
    release_messages: Callable[[], None] | None

    @classmethod
    def of(cls, dashboard: Dashboard) -> Board:
        stop = getattr(dashboard, "stop_requested", None)
        return cls(
            dashboard,
            stop if isinstance(stop, threading.Event) else None,
            getattr(dashboard, "set_pids", None),
            getattr(dashboard, "on_wait", None),
            getattr(dashboard, "set_machines", None),
            getattr(dashboard, "release_messages", None),
        )


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
        return Board.of(new_dashboard())  # registered from above (nbaccel/__init__.py)
    if not isinstance(dashboard, Dashboard):
        raise TypeError(
            f"dashboard must be True, False, None or a dashboard from nbaccel.widgets (an "
            f"object with begin, chain, line_sink and end), got {type(dashboard).__name__}."
        )
    return Board.of(dashboard)
