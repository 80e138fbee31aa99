"""The process-wide state: ``PartialState``, ``AcceleratorState`` and ``GradientState``.

All three are views on one record per process (see :mod:`nbaccel.state.registry`): every
instance sees the state set up by the first one, and documented attributes are read-only.
"""

from .accelerator import AcceleratorState
from .gradient import GradientState
from .partial import PartialState

__all__ = ["AcceleratorState", "GradientState", "PartialState"]
