"""The module path ``accelerate.utils.dataclasses``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.dataclasses import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports: __all__ comes from nbaccel.module_paths)

from ..constants import (
    MITA_PROFILING_AVAILABLE_PYTORCH_VERSION,
    XPU_PROFILING_AVAILABLE_PYTORCH_VERSION,
)
from ..data.configuration import DataLoaderConfiguration
from ..enums import (
    ComputeEnvironment,
    CustomDtype,
    DDPCommunicationHookType,
    DistributedType,
    DynamoBackend,
    LoggerType,
    PrecisionType,
    RNGType,
    SageMakerDistributedType,
)
from ..environment.availability import (
    compare_versions,
    is_cuda_available,
    is_hpu_available,
    is_mlu_available,
    is_msamp_available,
    is_musa_available,
    is_neuron_available,
    is_npu_available,
    is_rocm_available,
    is_torch_version,
    is_torchao_available,
    is_transformer_engine_available,
    is_xpu_available,
)
from ..environment.patching import parse_flag_from_env, str_to_bool
from ..fsdp.plugin import FullyShardedDataParallelPlugin
from ..kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
)
from ..module_paths import names_of
from ..ops.structures import TensorInformation
from ..parallelism import (
    DeepSpeedSequenceParallelConfig,
    TorchContextParallelConfig,
    TorchTensorParallelConfig,
    TorchTensorParallelPlugin,
)
from ..plugins import GradientAccumulationPlugin, ProjectConfiguration, TorchDynamoPlugin
from ..profiling import ProfileKwargs
from ..unsupported import DeepSpeedPlugin, MegatronLMPlugin

__all__ = names_of(__name__)
