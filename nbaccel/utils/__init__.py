"""Re-exports only: the names user code imports from ``accelerate.utils``."""

from ..checkpoint import load_checkpoint_in_model
from ..config import write_basic_config
from ..data import DataLoaderConfiguration, skip_first_batches
from ..enums import DistributedType, DynamoBackend, LoggerType, PrecisionType, RNGType
from ..fsdp import (
    FullyShardedDataParallelPlugin,
    disable_fsdp_ram_efficient_loading,
    enable_fsdp_ram_efficient_loading,
    fsdp2_load_full_state_dict,
    fsdp2_prepare_auto_wrap_policy,
    fsdp2_prepare_model,
    fsdp2_switch_optimizer_parameters,
)
from ..fsdp.merge import merge_fsdp_weights
from ..kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
)
from ..modeling import find_tied_parameters, retie_parameters
from ..ops import (
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
from ..plugins import GradientAccumulationPlugin, ProjectConfiguration, TorchDynamoPlugin
from ..seeding import set_seed
from ..tracking import (
    CometMLTracker,
    GeneralTracker,
    JSONLTracker,
    MLflowTracker,
    TensorBoardTracker,
    WandBTracker,
)
from ..utils_more import *  # noqa: F403  (the rest of accelerate.utils)
from ..utils_more import __all__ as _more_names

__all__ = [
    "AutocastKwargs",
    "CometMLTracker",
    "DataLoaderConfiguration",
    "DistributedDataParallelKwargs",
    "DistributedType",
    "DynamoBackend",
    "FullyShardedDataParallelPlugin",
    "GeneralTracker",
    "GradScalerKwargs",
    "GradientAccumulationPlugin",
    "InitProcessGroupKwargs",
    "JSONLTracker",
    "KwargsHandler",
    "LoggerType",
    "MLflowTracker",
    "PrecisionType",
    "ProjectConfiguration",
    "RNGType",
    "TensorBoardTracker",
    "TorchDynamoPlugin",
    "WandBTracker",
    "broadcast",
    "broadcast_object_list",
    "concatenate",
    "convert_to_fp32",
    "disable_fsdp_ram_efficient_loading",
    "enable_fsdp_ram_efficient_loading",
    "find_batch_size",
    "find_tied_parameters",
    "fsdp2_load_full_state_dict",
    "fsdp2_prepare_auto_wrap_policy",
    "fsdp2_prepare_model",
    "fsdp2_switch_optimizer_parameters",
    "gather",
    "gather_object",
    "honor_type",
    "is_torch_tensor",
    "listify",
    "load_checkpoint_in_model",
    "merge_fsdp_weights",
    "pad_across_processes",
    "recursively_apply",
    "reduce",
    "retie_parameters",
    "send_to_device",
    "set_seed",
    "skip_first_batches",
    "slice_tensors",
    "write_basic_config",
]
__all__ += _more_names
