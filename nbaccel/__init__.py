"""nbaccel: train PyTorch models on many processes, GPUs, machines or TPU cores from a notebook."""

from .accelerator import Accelerator
from .big_modeling import (
    cpu_offload,
    cpu_offload_with_hook,
    disk_offload,
    dispatch_model,
    infer_auto_device_map,
    load_checkpoint_and_dispatch,
)
from .checkpoint import load_checkpoint_in_model
from .config import write_basic_config
from .data import DataLoaderConfiguration, skip_first_batches
from .enums import DistributedType, DynamoBackend, LoggerType, PrecisionType, RNGType
from .fsdp import FullyShardedDataParallelPlugin
from .kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
)
from .launch.parent.dashboards import Dashboard, register_dashboard_factory
from .launch.parent.errors import WorkerError
from .launch.parent.notebook import debug_launcher, notebook_launcher
from .launch.parent.pool import WorkerPool
from .logging import get_logger
from .plugins import GradientAccumulationPlugin, ProjectConfiguration, TorchDynamoPlugin
from .seeding import set_seed
from .state import AcceleratorState, GradientState, PartialState
from .tracking import GeneralTracker
from .utils_more import (
    DDPCommunicationHookType,
    DeepSpeedPlugin,
    ParallelismConfig,
    ProfileKwargs,
    find_executable_batch_size,
    init_empty_weights,
    init_on_device,
    is_rich_available,
    synchronize_rng_states,
)

__version__ = "0.1.0"


def _widgets_dashboard() -> Dashboard:
    """``notebook_launcher(dashboard=True)``'s dashboard: the widgets layer plugs in from above."""
    from .widgets import launch_dashboard

    return launch_dashboard()


register_dashboard_factory(_widgets_dashboard)


def load_ipython_extension(shell: object) -> None:
    """``%load_ext nbaccel``: the ``%nbaccel`` and ``%%nbaccel`` magics (docs/pool.md)."""
    from .magics import load_ipython_extension as load

    load(shell)


def unload_ipython_extension(shell: object) -> None:
    """``%unload_ext nbaccel``: stop the magics' pool and remove the magics."""
    from .magics import unload_ipython_extension as unload

    unload(shell)


__all__ = [
    "Accelerator",
    "AcceleratorState",
    "AutocastKwargs",
    "DataLoaderConfiguration",
    "DistributedDataParallelKwargs",
    "DistributedType",
    "DynamoBackend",
    "FullyShardedDataParallelPlugin",
    "GeneralTracker",
    "GradScalerKwargs",
    "GradientAccumulationPlugin",
    "GradientState",
    "InitProcessGroupKwargs",
    "KwargsHandler",
    "LoggerType",
    "PartialState",
    "PrecisionType",
    "ProjectConfiguration",
    "RNGType",
    "TorchDynamoPlugin",
    "WorkerError",
    "WorkerPool",
    "__version__",
    "debug_launcher",
    "get_logger",
    "load_checkpoint_in_model",
    "notebook_launcher",
    "set_seed",
    "skip_first_batches",
    "write_basic_config",
]
__all__ += [
    "DDPCommunicationHookType",
    "DeepSpeedPlugin",
    "ParallelismConfig",
    "ProfileKwargs",
    "find_executable_batch_size",
    "init_empty_weights",
    "init_on_device",
    "is_rich_available",
    "synchronize_rng_states",
]
__all__ += [
    "cpu_offload",
    "cpu_offload_with_hook",
    "disk_offload",
    "dispatch_model",
    "infer_auto_device_map",
    "load_checkpoint_and_dispatch",
]
