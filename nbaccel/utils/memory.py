"""The module path ``accelerate.utils.memory``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.memory import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports: __all__ comes from nbaccel.module_paths)

from ..environment.availability import (
    is_cuda_available,
    is_hpu_available,
    is_mlu_available,
    is_mps_available,
    is_musa_available,
    is_neuron_available,
    is_npu_available,
    is_sdaa_available,
    is_xpu_available,
)
from ..memory import clear_device_cache, find_executable_batch_size, release_memory
from ..module_paths import names_of

__all__ = names_of(__name__)
