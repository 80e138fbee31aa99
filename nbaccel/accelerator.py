"""The module path ``accelerate.accelerator``: the Accelerator of :mod:`nbaccel.training`."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from .module_paths import names_of
from .training.accelerator import Accelerator

__all__ = names_of(__name__)
