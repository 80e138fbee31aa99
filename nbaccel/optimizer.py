"""The module path ``accelerate.optimizer``: the prepared optimizer of :mod:`nbaccel.optim`."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from .module_paths import names_of
from .optim import AcceleratedOptimizer

__all__ = names_of(__name__)
