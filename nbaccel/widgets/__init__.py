"""Jupyter widgets, drawn by the notebook's own process: the config panel and launch dashboard.

``ConfigPanel`` and ``LaunchDashboard`` need ipywidgets (``pip install nbaccel[widgets]``);
:func:`launch_dashboard` falls back to plain text without it or outside a notebook.
"""

from __future__ import annotations

from typing import Any

from ..environment import in_notebook
from .form import PanelValues, validate
from .hardware import Hardware
from .state import DashboardState
from .text import TextDashboard

__all__ = [
    "ConfigPanel",
    "DashboardState",
    "Hardware",
    "LaunchDashboard",
    "PanelValues",
    "TextDashboard",
    "launch_dashboard",
    "validate",
    "widgets_available",
]


def widgets_available() -> bool:
    """True when ipywidgets imports and this process is a Jupyter kernel."""

    if not in_notebook():
        return False
    try:
        import ipywidgets  # noqa: F401  # probes for the optional ipywidgets (widgets extra)
    except ImportError:
        return False
    return True


def launch_dashboard(display: bool = True) -> Any:
    """A dashboard for ``notebook_launcher(dashboard=True)``: a widget in a notebook with
    ipywidgets (displayed now when ``display``), plain text otherwise."""
    if not widgets_available():
        return TextDashboard()
    # the widgets import ipywidgets, optional (the widgets extra)
    from .dashboard import LaunchDashboard

    board = LaunchDashboard()
    if display:
        # IPython is there only in a notebook (the notebook extra)
        from IPython.display import display as show

        show(board)
    return board


def __getattr__(name: str) -> Any:
    if name == "ConfigPanel":
        # the widgets import ipywidgets, optional (the widgets extra)
        from .panel import ConfigPanel

        return ConfigPanel
    if name == "LaunchDashboard":
        # the widgets import ipywidgets, optional (the widgets extra)
        from .dashboard import LaunchDashboard

        return LaunchDashboard
    raise AttributeError(f"module 'nbaccel.widgets' has no attribute {name!r}")
