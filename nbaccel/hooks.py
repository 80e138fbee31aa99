"""The module path ``accelerate.hooks``: the model hooks of :mod:`nbaccel.modeling.hooks` and
:mod:`nbaccel.modeling.aligning`."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from .modeling.aligning import AlignDevicesHook
from .modeling.aligning import attach_align_device_hook
from .modeling.aligning import attach_align_device_hook_on_blocks
from .modeling.aligning import attach_execution_device_hook
from .modeling.hooks import CpuOffload
from .modeling.hooks import LayerwiseCastingHook
from .modeling.hooks import ModelHook
from .modeling.hooks import SequentialHook
from .modeling.hooks import UserCpuOffloadHook
from .modeling.hooks import add_hook_to_module
from .modeling.hooks import remove_hook_from_module
from .modeling.hooks import remove_hook_from_submodules
from .module_paths import names_of

__all__ = names_of(__name__)
