"""The module path ``accelerate.utils.dataclasses``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.dataclasses import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from ..constants import MITA_PROFILING_AVAILABLE_PYTORCH_VERSION
from ..constants import XPU_PROFILING_AVAILABLE_PYTORCH_VERSION
from ..data.configuration import DataLoaderConfiguration
from ..enums import ComputeEnvironment
from ..enums import CustomDtype
from ..enums import DDPCommunicationHookType
from ..enums import DistributedType
from ..enums import DynamoBackend
from ..enums import LoggerType
from ..enums import PrecisionType
from ..enums import RNGType
from ..enums import SageMakerDistributedType
from ..environment.availability import compare_versions
from ..environment.availability import is_cuda_available
from ..environment.availability import is_hpu_available
from ..environment.availability import is_mlu_available
from ..environment.availability import is_msamp_available
from ..environment.availability import is_musa_available
from ..environment.availability import is_neuron_available
from ..environment.availability import is_npu_available
from ..environment.availability import is_rocm_available
from ..environment.availability import is_torch_version
from ..environment.availability import is_torchao_available
from ..environment.availability import is_transformer_engine_available
from ..environment.availability import is_xpu_available
from ..environment.patching import parse_flag_from_env
from ..environment.patching import str_to_bool
from ..fsdp.plugin import FullyShardedDataParallelPlugin
from ..kwargs_handlers import AutocastKwargs
from ..kwargs_handlers import DistributedDataParallelKwargs
from ..kwargs_handlers import GradScalerKwargs
from ..kwargs_handlers import InitProcessGroupKwargs
from ..kwargs_handlers import KwargsHandler
from ..module_paths import names_of
from ..ops.structures import TensorInformation
from ..parallelism import DeepSpeedSequenceParallelConfig
from ..parallelism import TorchContextParallelConfig
from ..parallelism import TorchTensorParallelConfig
from ..parallelism import TorchTensorParallelPlugin
from ..plugins import GradientAccumulationPlugin
from ..plugins import ProjectConfiguration
from ..plugins import TorchDynamoPlugin
from ..profiling import ProfileKwargs
from ..deepspeed.plugin import DeepSpeedPlugin
from ..unsupported import MegatronLMPlugin

__all__ = names_of(__name__)
