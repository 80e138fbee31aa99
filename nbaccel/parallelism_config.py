"""The module path ``accelerate.parallelism_config``: :class:`ParallelismConfig` lives in
:mod:`nbaccel.parallelism`."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from .module_paths import names_of
from .parallelism import ParallelismConfig

__all__ = names_of(__name__)
