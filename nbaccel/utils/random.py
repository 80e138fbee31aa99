"""The module path ``accelerate.utils.random``: the names of :mod:`nbaccel.utils` it
holds, so that ``from accelerate.utils.random import ...`` runs with only the import
changed."""

from . import (
    DistributedType,
    RNGType,
    is_hpu_available,
    is_mlu_available,
    is_musa_available,
    is_neuron_available,
    is_npu_available,
    is_sdaa_available,
    is_torch_xla_available,
    is_xpu_available,
    set_seed,
    synchronize_rng_state,
    synchronize_rng_states,
)

__all__ = [
    "DistributedType",
    "RNGType",
    "is_hpu_available",
    "is_mlu_available",
    "is_musa_available",
    "is_neuron_available",
    "is_npu_available",
    "is_sdaa_available",
    "is_torch_xla_available",
    "is_xpu_available",
    "set_seed",
    "synchronize_rng_state",
    "synchronize_rng_states",
]
