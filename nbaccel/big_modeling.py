"""The module path ``accelerate.big_modeling``: creating a model without memory works;
big-model inference is refused (:mod:`nbaccel.modeling.offload` says what to use instead)."""

# ruff: noqa: F401  (re-exports: __all__ comes from nbaccel.module_paths)

from .modeling.creation import init_empty_weights, init_on_device
from .modeling.offload import (
    attach_align_device_hook,
    cpu_offload,
    cpu_offload_with_hook,
    disk_offload,
    dispatch_model,
    get_state_dict_from_offload,
    has_offloaded_params,
    infer_auto_device_map,
    load_checkpoint_and_dispatch,
    remove_hook_from_module,
)
from .module_paths import names_of

__all__ = names_of(__name__)
