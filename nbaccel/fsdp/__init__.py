"""Fully sharded data parallel training: the plugin, FSDP1 / FSDP2 wrapping, hfai's API."""

from torch.distributed.fsdp import BackwardPrefetch

from .fsdp2 import (
    fsdp2_load_full_state_dict,
    fsdp2_prepare_auto_wrap_policy,
    fsdp2_prepare_model,
    fsdp2_switch_optimizer_parameters,
)
from .hfai import FullyShardedDataParallel
from .plugin import FullyShardedDataParallelPlugin
from .policies import size_based_auto_wrap_policy, transformer_auto_wrap_policy
from .ram import (
    disable_fsdp_ram_efficient_loading,
    enable_fsdp_ram_efficient_loading,
    ram_efficient_init,
)

__all__ = [
    "BackwardPrefetch",
    "FullyShardedDataParallel",
    "FullyShardedDataParallelPlugin",
    "disable_fsdp_ram_efficient_loading",
    "enable_fsdp_ram_efficient_loading",
    "fsdp2_load_full_state_dict",
    "fsdp2_prepare_auto_wrap_policy",
    "fsdp2_prepare_model",
    "fsdp2_switch_optimizer_parameters",
    "ram_efficient_init",
    "size_based_auto_wrap_policy",
    "transformer_auto_wrap_policy",
]
