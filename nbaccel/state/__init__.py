"""The process-wide state: ``PartialState``, ``AcceleratorState`` and ``GradientState``.

All three are views on one record per process (see :mod:`nbaccel.state.registry`): every
instance sees the state set up by the first one, and documented attributes are read-only,
but for those Accelerate's own tests set: ``GradientState.sync_gradients``,
``PartialState.debug`` and ``AcceleratorState.distributed_type``.
"""

from .accelerator import AcceleratorState
from .gradient import GradientState
from .partial import PartialState
from .registry import STATE

__all__ = ["AcceleratorState", "GradientState", "PartialState", "is_initialized"]


def is_initialized() -> bool:
    """True once an ``AcceleratorState`` (or ``Accelerator``) has been set up in this process
    (``AcceleratorState().initialized`` without creating one)."""
    return STATE.accelerator is not None
