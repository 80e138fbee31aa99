"""The module path ``accelerate.hooks``: the hook helpers of :mod:`nbaccel.big_modeling`."""

from .big_modeling import attach_align_device_hook, remove_hook_from_module

__all__ = ["attach_align_device_hook", "remove_hook_from_module"]
