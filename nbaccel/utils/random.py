"""The module path ``accelerate.utils.random``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.random import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports: __all__ comes from nbaccel.module_paths)

from ..data.rng import synchronize_rng_state, synchronize_rng_states
from ..enums import DistributedType, RNGType
from ..environment.availability import (
    is_hpu_available,
    is_mlu_available,
    is_musa_available,
    is_neuron_available,
    is_npu_available,
    is_sdaa_available,
    is_torch_xla_available,
    is_xpu_available,
)
from ..module_paths import names_of
from ..seeding import set_seed

__all__ = names_of(__name__)
