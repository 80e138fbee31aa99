"""The module path ``accelerate.utils.fsdp_utils``: the names of :mod:`nbaccel.utils` it
holds, so that ``from accelerate.utils.fsdp_utils import ...`` runs with only the import
changed."""

from . import (
    OPTIMIZER_NAME,
    SAFE_WEIGHTS_NAME,
    WEIGHTS_NAME,
    disable_fsdp_ram_efficient_loading,
    enable_fsdp_ram_efficient_loading,
    fsdp2_load_full_state_dict,
    fsdp2_prepare_auto_wrap_policy,
    fsdp2_prepare_model,
    fsdp2_switch_optimizer_parameters,
    get_module_children_bottom_up,
    is_compiled_module,
    is_peft_model,
    is_torch_version,
    merge_fsdp_weights,
    save,
)

__all__ = [
    "OPTIMIZER_NAME",
    "SAFE_WEIGHTS_NAME",
    "WEIGHTS_NAME",
    "disable_fsdp_ram_efficient_loading",
    "enable_fsdp_ram_efficient_loading",
    "fsdp2_load_full_state_dict",
    "fsdp2_prepare_auto_wrap_policy",
    "fsdp2_prepare_model",
    "fsdp2_switch_optimizer_parameters",
    "get_module_children_bottom_up",
    "is_compiled_module",
    "is_peft_model",
    "is_torch_version",
    "merge_fsdp_weights",
    "save",
]
