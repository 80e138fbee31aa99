"""nbaccel: train PyTorch models on many processes, GPUs, machines or TPU cores from a notebook."""

from .enums import DistributedType, DynamoBackend, LoggerType, PrecisionType, RNGType
from .kwargs_handlers import InitProcessGroupKwargs, KwargsHandler
from .launch.errors import WorkerError
from .launch.notebook import debug_launcher, notebook_launcher
from .plugins import GradientAccumulationPlugin, TorchDynamoPlugin
from .seeding import set_seed
from .state import AcceleratorState, GradientState, PartialState

__version__ = "0.1.0"

__all__ = [
    "AcceleratorState",
    "DistributedType",
    "DynamoBackend",
    "GradientAccumulationPlugin",
    "GradientState",
    "InitProcessGroupKwargs",
    "KwargsHandler",
    "LoggerType",
    "PartialState",
    "PrecisionType",
    "RNGType",
    "TorchDynamoPlugin",
    "WorkerError",
    "__version__",
    "debug_launcher",
    "notebook_launcher",
    "set_seed",
]
