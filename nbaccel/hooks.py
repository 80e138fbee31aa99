"""The module path ``accelerate.hooks``: the hook helpers of :mod:`nbaccel.modeling.offload`."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from .modeling.offload import attach_align_device_hook
from .modeling.offload import remove_hook_from_module
from .module_paths import names_of

__all__ = names_of(__name__)
