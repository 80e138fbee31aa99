"""The module path ``accelerate.scheduler``: the prepared scheduler of :mod:`nbaccel.optim`."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from .module_paths import names_of
from .optim import AcceleratedScheduler

__all__ = names_of(__name__)
