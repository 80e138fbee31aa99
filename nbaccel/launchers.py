"""The module path ``accelerate.launchers``: the launchers of
:mod:`nbaccel.launch.parent.notebook`."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from .launch.parent.notebook import debug_launcher
from .launch.parent.notebook import notebook_launcher
from .module_paths import names_of

__all__ = names_of(__name__)
