"""The module path ``accelerate.utils.memory``: the names of :mod:`nbaccel.utils` it
holds, so that ``from accelerate.utils.memory import ...`` runs with only the import
changed."""

from . import (
    clear_device_cache,
    find_executable_batch_size,
    is_cuda_available,
    is_hpu_available,
    is_mlu_available,
    is_mps_available,
    is_musa_available,
    is_neuron_available,
    is_npu_available,
    is_sdaa_available,
    is_xpu_available,
    release_memory,
)

__all__ = [
    "clear_device_cache",
    "find_executable_batch_size",
    "is_cuda_available",
    "is_hpu_available",
    "is_mlu_available",
    "is_mps_available",
    "is_musa_available",
    "is_neuron_available",
    "is_npu_available",
    "is_sdaa_available",
    "is_xpu_available",
    "release_memory",
]
