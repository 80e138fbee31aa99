"""Operations on nested tensors: moving, slicing and the collectives between processes.

``gather``, ``gather_object``, ``pad_across_processes``, ``reduce``, ``broadcast`` and
``broadcast_object_list`` exchange data between the processes of the job (they return their
input unchanged on one process); the rest work on one process's nested lists, tuples and dicts.
"""

from .collectives import (
    REDUCTIONS,
    broadcast,
    broadcast_object_list,
    gather,
    gather_object,
    pad_across_processes,
    reduce,
)
from .nested import (
    concatenate,
    convert_to_fp32,
    find_batch_size,
    find_device,
    has_only_tensors,
    honor_type,
    ignorant_find_batch_size,
    is_namedtuple,
    is_torch_tensor,
    listify,
    recursively_apply,
    send_to_device,
    slice_tensors,
    truncate,
)

__all__ = [
    "REDUCTIONS",
    "broadcast",
    "broadcast_object_list",
    "concatenate",
    "convert_to_fp32",
    "find_batch_size",
    "find_device",
    "gather",
    "gather_object",
    "has_only_tensors",
    "honor_type",
    "ignorant_find_batch_size",
    "is_namedtuple",
    "is_torch_tensor",
    "listify",
    "pad_across_processes",
    "recursively_apply",
    "reduce",
    "send_to_device",
    "slice_tensors",
    "truncate",
]
