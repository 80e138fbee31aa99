"""The seam a dashboard plugs into from above: ``notebook_launcher(dashboard=True)`` calls the
factory that a higher layer registered (``nbaccel`` registers ``nbaccel.widgets``' dashboard),
so the launcher never imports the widgets layer itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["new_dashboard", "register_dashboard_factory"]

DashboardFactory = Callable[[], Any]
_FACTORY: list[DashboardFactory] = []  # at most one: the latest registered


def register_dashboard_factory(factory: DashboardFactory) -> None:
    """Make ``factory()`` the dashboard that ``notebook_launcher(dashboard=True)`` feeds.

    The dashboard it returns offers ``begin``, ``chain``, ``end`` and ``line_sink`` (and
    optionally ``stop_requested``, ``set_pids`` and ``on_wait``; see ``docs/widgets.md``).
    """
    if not callable(factory):
        raise TypeError(f"a dashboard factory must be callable, got {type(factory).__name__}.")
    _FACTORY[:] = [factory]


def new_dashboard() -> Any:
    """A new dashboard from the registered factory."""
    if not _FACTORY:
        raise RuntimeError(
            "notebook_launcher(dashboard=True) found no dashboard: import nbaccel (which "
            "registers nbaccel.widgets' dashboard) or pass a dashboard object."
        )
    return _FACTORY[0]()
