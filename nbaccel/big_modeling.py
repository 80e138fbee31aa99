"""The module path ``accelerate.big_modeling``: creating a model without memory, and
big-model inference (device maps, CPU and disk offload; :mod:`nbaccel.modeling.offload`)."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from .checkpoint.loading import load_checkpoint_and_dispatch
from .checkpoint.loading import load_checkpoint_in_model
from .modeling.aligning import AlignDevicesHook
from .modeling.aligning import attach_align_device_hook
from .modeling.aligning import attach_align_device_hook_on_blocks
from .modeling.allocation import infer_auto_device_map
from .modeling.creation import init_empty_weights
from .modeling.creation import init_on_device
from .modeling.device_map import get_balanced_memory
from .modeling.hooks import CpuOffload
from .modeling.hooks import LayerwiseCastingHook
from .modeling.hooks import UserCpuOffloadHook
from .modeling.hooks import add_hook_to_module
from .modeling.hooks import attach_layerwise_casting_hooks
from .modeling.hooks import remove_hook_from_module
from .modeling.moves import find_tied_parameters
from .modeling.moves import retie_parameters
from .modeling.offload import cpu_offload
from .modeling.offload import cpu_offload_with_hook
from .modeling.offload import disk_offload
from .modeling.offload import dispatch_model
from .modeling.offload_store import OffloadedWeightsLoader
from .modeling.offload_store import offload_state_dict
from .modeling.offloaded import get_state_dict_from_offload
from .modeling.offloaded import has_offloaded_params
from .modeling.tensors import check_device_map
from .modeling.tensors import extract_submodules_state_dict
from .module_paths import names_of

__all__ = names_of(__name__)
