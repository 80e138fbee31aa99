"""The module path ``accelerate.big_modeling``: creating a model without memory works;
big-model inference is refused (:mod:`nbaccel.modeling.offload` says what to use instead)."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from .modeling.creation import init_empty_weights
from .modeling.creation import init_on_device
from .modeling.offload import attach_align_device_hook
from .modeling.offload import cpu_offload
from .modeling.offload import cpu_offload_with_hook
from .modeling.offload import disk_offload
from .modeling.offload import dispatch_model
from .modeling.offload import get_state_dict_from_offload
from .modeling.offload import has_offloaded_params
from .modeling.offload import infer_auto_device_map
from .modeling.offload import load_checkpoint_and_dispatch
from .modeling.offload import remove_hook_from_module
from .module_paths import names_of

__all__ = names_of(__name__)
