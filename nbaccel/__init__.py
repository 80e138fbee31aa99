"""nbaccel: train PyTorch models on many processes, GPUs, machines or TPU cores from a notebook.

The names below load on first use (PEP 562): ``import nbaccel`` and the processes that need
only part of it (a host's agent, a rank that asks for ``PartialState``) do not pay for the
rest (FSDP's modules alone take half a second). Each name's home is in
:mod:`nbaccel.module_paths`; ``from nbaccel import X`` and ``nbaccel.X`` work as usual.
"""

# ruff: noqa: F401  (the names for type checkers, one line per name and home; __all__ and the
# loading come from nbaccel.module_paths)

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .launch.parent.dashboards import Dashboard, register_dashboard_factory
from .launch.parent.preloads import register_fork_preload
from .module_paths import homes, names_of

if TYPE_CHECKING:
    from .accelerator import Accelerator
    from .checkpoint.loading import load_checkpoint_and_dispatch
    from .checkpoint.loading import load_checkpoint_in_model
    from .config import write_basic_config
    from .data import DataLoaderConfiguration
    from .data import skip_first_batches
    from .data.rng import synchronize_rng_states
    from .enums import DDPCommunicationHookType
    from .enums import DistributedType
    from .enums import DynamoBackend
    from .enums import LoggerType
    from .enums import PrecisionType
    from .enums import RNGType
    from .environment.availability import is_rich_available
    from .fsdp import FullyShardedDataParallelPlugin
    from .kwargs_handlers import AutocastKwargs
    from .kwargs_handlers import DistributedDataParallelKwargs
    from .kwargs_handlers import GradScalerKwargs
    from .kwargs_handlers import InitProcessGroupKwargs
    from .kwargs_handlers import KwargsHandler
    from .launch.parent.errors import StallError
    from .launch.parent.errors import WorkerError
    from .launch.parent.notebook import debug_launcher
    from .launch.parent.notebook import notebook_launcher
    from .launch.parent.pool import WorkerPool
    from .logging import get_logger
    from .memory import find_executable_batch_size
    from .modeling.creation import init_empty_weights
    from .modeling.creation import init_on_device
    from .modeling.allocation import infer_auto_device_map
    from .modeling.offload import cpu_offload
    from .modeling.offload import cpu_offload_with_hook
    from .modeling.offload import disk_offload
    from .modeling.offload import dispatch_model
    from .parallelism import ParallelismConfig
    from .plugins import GradientAccumulationPlugin
    from .plugins import ProjectConfiguration
    from .plugins import TorchDynamoPlugin
    from .profiling import ProfileKwargs
    from .seeding import set_seed
    from .state import AcceleratorState
    from .state import GradientState
    from .state import PartialState
    from .tracking import GeneralTracker
    from .deepspeed.plugin import DeepSpeedPlugin
    from .version import __version__

__all__ = names_of(__name__)  # nbaccel.module_paths lists the names and their homes
_HOMES = homes(__name__)


def __getattr__(name: str) -> Any:
    """Load ``name`` from its home the first time it is asked for, then keep it here."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def _widgets_dashboard() -> Dashboard:
    """``notebook_launcher(dashboard=True)``'s dashboard: the widgets layer plugs in from above."""
    # the widgets sit above the launcher and load only when a dashboard is asked for
    from .widgets import launch_dashboard

    return launch_dashboard()


register_dashboard_factory(_widgets_dashboard)


def _load_accelerator() -> None:
    """Before ranks fork from the notebook: the Accelerator and its parts (FSDP's modules),
    which a rank would otherwise import for itself at every launch."""
    # the one heavy import of the package, loaded only when ranks are about to fork
    from .training import accelerator


register_fork_preload(_load_accelerator)


def load_ipython_extension(shell: object) -> None:
    """``%load_ext nbaccel``: the ``%nbaccel`` and ``%%nbaccel`` magics (docs/pool.md)."""
    # the magics need IPython, loaded only by %load_ext
    from .magics import load_ipython_extension as load

    load(shell)


def unload_ipython_extension(shell: object) -> None:
    """``%unload_ext nbaccel``: stop the magics' pool and remove the magics."""
    # the magics need IPython, loaded only by %load_ext
    from .magics import unload_ipython_extension as unload

    unload(shell)
