"""Re-exports only: the names user code imports from ``accelerate.utils``."""

from .enums import DistributedType, DynamoBackend, LoggerType, PrecisionType, RNGType
from .kwargs_handlers import InitProcessGroupKwargs, KwargsHandler
from .plugins import GradientAccumulationPlugin, TorchDynamoPlugin
from .seeding import set_seed

__all__ = [
    "DistributedType",
    "DynamoBackend",
    "GradientAccumulationPlugin",
    "InitProcessGroupKwargs",
    "KwargsHandler",
    "LoggerType",
    "PrecisionType",
    "RNGType",
    "TorchDynamoPlugin",
    "set_seed",
]
