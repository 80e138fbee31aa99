"""Re-exports only: the names user code imports from ``accelerate.utils``."""

from .data import DataLoaderConfiguration, skip_first_batches
from .enums import DistributedType, DynamoBackend, LoggerType, PrecisionType, RNGType
from .kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
)
from .modeling import find_tied_parameters, retie_parameters
from .ops import (
    broadcast,
    broadcast_object_list,
    concatenate,
    convert_to_fp32,
    find_batch_size,
    gather,
    gather_object,
    honor_type,
    is_torch_tensor,
    listify,
    pad_across_processes,
    recursively_apply,
    reduce,
    send_to_device,
    slice_tensors,
)
from .plugins import GradientAccumulationPlugin, ProjectConfiguration, TorchDynamoPlugin
from .seeding import set_seed

__all__ = [
    "AutocastKwargs",
    "DataLoaderConfiguration",
    "DistributedDataParallelKwargs",
    "DistributedType",
    "DynamoBackend",
    "GradScalerKwargs",
    "GradientAccumulationPlugin",
    "InitProcessGroupKwargs",
    "KwargsHandler",
    "LoggerType",
    "PrecisionType",
    "ProjectConfiguration",
    "RNGType",
    "TorchDynamoPlugin",
    "broadcast",
    "broadcast_object_list",
    "concatenate",
    "convert_to_fp32",
    "find_batch_size",
    "find_tied_parameters",
    "gather",
    "gather_object",
    "honor_type",
    "is_torch_tensor",
    "listify",
    "pad_across_processes",
    "recursively_apply",
    "reduce",
    "retie_parameters",
    "send_to_device",
    "set_seed",
    "skip_first_batches",
    "slice_tensors",
]
