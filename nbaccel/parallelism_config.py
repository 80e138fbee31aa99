"""The module path ``accelerate.parallelism_config``: :class:`ParallelismConfig` lives in
:mod:`nbaccel.parallelism`."""

from .parallelism import ParallelismConfig

__all__ = ["ParallelismConfig"]
