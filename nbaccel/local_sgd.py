"""The module path ``accelerate.local_sgd``: :class:`LocalSGD` of :mod:`nbaccel.training`."""

# ruff: noqa: F401  (re-exports: __all__ comes from nbaccel.module_paths)

from .module_paths import names_of
from .training.local_sgd import LocalSGD

__all__ = names_of(__name__)
