"""The one process-wide record that every state view reads, and how it is built."""

from __future__ import annotations

import atexit
import contextlib
import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.constants import default_pg_timeout

from ..enums import DistributedType
from ..environment import LaunchEnvironment, choose_device, read_launch_environment, xla_topology
from ..kwargs_handlers import InitProcessGroupKwargs
from ..plugins import GradientAccumulationPlugin
from .shared import StateResetError

__all__ = [
    "STATE",
    "AcceleratorRecord",
    "GradientRecord",
    "ProcessRecord",
    "Registry",
    "build_process_record",
    "current_process",
    "process_group_kwargs",
    "reset_registry",
    "set_aside",
]

_PG_KWARGS = ("backend", "init_method", "timeout")


@dataclass
class ProcessRecord:
    """What every PartialState sees: where this process sits in the job."""

    launch: LaunchEnvironment
    device: torch.device
    backend: str | None
    distributed_type: DistributedType
    num_processes: int
    process_index: int
    local_process_index: int
    local_num_processes: int
    cpu: bool
    owns_process_group: bool


@dataclass
class AcceleratorRecord:
    """What AcceleratorState adds: precision and the training plugins."""

    mixed_precision: str
    fsdp_plugin: Any = None
    dynamo_plugin: Any = None
    # FSDP was asked for (a plugin, the launch or the config file), even where it was set aside
    fsdp_asked: bool = False
    # DeepSpeed plugins by name (None: DeepSpeed is not in use); one of them is selected
    deepspeed_plugins: dict[str, Any] | None = None
    from_accelerator: bool = False
    parallelism_config: Any = None
    # what ``AcceleratorState.distributed_type = ...`` set (None: the process's own)
    distributed_type: DistributedType | None = None


@dataclass
class GradientRecord:
    """What GradientState holds: when gradients synchronise."""

    plugin: GradientAccumulationPlugin
    sync_gradients: bool = True
    end_of_dataloader: bool = False
    remainder: int = -1
    active_dataloader: Any = None
    dataloader_references: list[Any] = field(default_factory=lambda: [None])
    xla_gradients_synced: bool = False


@dataclass
class Registry:
    """The one process-wide state."""

    process: ProcessRecord | None = None
    accelerator: AcceleratorRecord | None = None
    gradient: GradientRecord | None = None
    # Set by a launched worker: where events for the launcher go, and the worker's rank.
    # Not cleared by reset_registry (the worker outlives any one state).
    event_sink: Callable[[Any], None] | None = None
    worker_rank: int = 0


STATE = Registry()


def reset_registry(destroy_process_group: bool = False) -> None:
    """Forget the state (for tests and for the launcher between functions)."""
    if destroy_process_group and dist.is_initialized():
        dist.destroy_process_group()
    STATE.process = None
    STATE.accelerator = None
    STATE.gradient = None


@contextlib.contextmanager
def set_aside() -> Iterator[None]:
    """Run a block with no state set up, then put this process's state back as it was.

    ``debug_launcher`` runs under it: like Accelerate's, it starts its processes whatever the
    calling process holds (each launched process sets up its own state).
    """
    kept = (STATE.process, STATE.accelerator, STATE.gradient)
    reset_registry()
    try:
        yield
    finally:
        STATE.process, STATE.accelerator, STATE.gradient = kept


def process_group_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(kwargs) - set(_PG_KWARGS))
    if unknown:
        raise TypeError(
            f"PartialState got unexpected keyword arguments {unknown}; it accepts cpu= and the "
            f"init_process_group arguments {list(_PG_KWARGS)} (see InitProcessGroupKwargs)."
        )
    return InitProcessGroupKwargs(**kwargs).to_kwargs()


def build_process_record(cpu: bool, kwargs: dict[str, Any]) -> ProcessRecord:
    pg_kwargs = process_group_kwargs(kwargs)
    launch = read_launch_environment()
    choice = choose_device(launch, cpu=cpu)
    if choice.kind == "xla":
        topo = xla_topology()
        distributed = DistributedType.XLA
        rank, world, local, local_world = (
            topo.rank,
            topo.world_size,
            topo.local_rank,
            topo.local_world_size,
        )
    else:
        rank, world = launch.rank, launch.world_size
        local, local_world = launch.local_rank, launch.local_world_size
        distributed = DistributedType.NO
        if launch.distributed:
            gpu = choice.kind == "cuda"
            distributed = DistributedType.MULTI_GPU if gpu else DistributedType.MULTI_CPU
    owns = False
    if distributed in (DistributedType.MULTI_CPU, DistributedType.MULTI_GPU):
        owns = _join_process_group(launch, choice.backend, choice.device, pg_kwargs)
    backend = dist.get_backend() if dist.is_initialized() else choice.backend
    return ProcessRecord(
        launch=launch,
        device=choice.device,
        backend=backend,
        distributed_type=distributed,
        num_processes=world,
        process_index=rank,
        local_process_index=local,
        local_num_processes=local_world,
        cpu=choice.device.type == "cpu",
        owns_process_group=owns,
    )


def _join_process_group(
    launch: LaunchEnvironment, backend: str | None, device: torch.device, kwargs: dict[str, Any]
) -> bool:
    """Join the default process group unless it exists already; True when it was created here."""
    if device.type == "cuda":
        torch.cuda.set_device(device)  # a GPU worker has asked for CUDA: bind it to its device
    if dist.is_initialized():
        if dist.get_world_size() != launch.world_size:
            raise RuntimeError(
                f"A process group of size {dist.get_world_size()} already exists but the launch "
                f"environment says WORLD_SIZE={launch.world_size}."
            )
        return False
    init_method = kwargs.pop("init_method", None) or "env://"
    if init_method == "env://" and (launch.master_addr is None or launch.master_port is None):
        raise RuntimeError(
            f"This process was started as rank {launch.rank} of {launch.world_size} but "
            "MASTER_ADDR/MASTER_PORT are not set, so it cannot find the others. Launch it with "
            "nbaccel's notebook_launcher, `nbaccel launch` or torchrun, which set them."
        )
    if init_method == "env://" and launch.store_prefix and "store" not in kwargs:
        kwargs["store"] = _prefixed_store(launch, kwargs.get("timeout"))
    else:
        kwargs["init_method"] = init_method
    dist.init_process_group(
        backend=kwargs.pop("backend", None) or backend,
        rank=launch.rank,
        world_size=launch.world_size,
        **kwargs,
    )
    atexit.register(_leave_process_group)
    return True


def _prefixed_store(launch: LaunchEnvironment, timeout: timedelta | None) -> dist.Store:
    """A client of the store at ``MASTER_ADDR:MASTER_PORT`` whose every key carries the
    launch's secret prefix: a process that connects to the store without the secret (which
    travels only in the ranks' environment) finds none of the ranks' keys."""
    assert launch.master_addr is not None and launch.master_port is not None
    wait = timeout if timeout is not None else default_pg_timeout
    client = dist.TCPStore(
        launch.master_addr,
        launch.master_port,
        launch.world_size,
        is_master=False,
        timeout=wait,
    )
    return dist.PrefixStore(f"{launch.store_prefix}/", client)


def _leave_process_group() -> None:
    """At interpreter exit, close the group this process joined: its communication threads
    end in order instead of being torn down with the interpreter (which can abort a rank
    whose peer already left). A user's own ``destroy_process_group`` makes this a no-op.

    Objects that still hold the group after it is destroyed (an FSDP model's reference
    cycles, say) would free it only during the interpreter's own teardown, where the group's
    threads and pending work can no longer release their Python objects safely (the process
    aborts: "terminate called without an active exception"); a collection here frees them
    while the interpreter is whole."""
    with contextlib.suppress(Exception):
        if dist.is_initialized():
            dist.destroy_process_group()
            gc.collect()


def current_process() -> ProcessRecord:
    record = STATE.process
    if record is None:
        raise StateResetError(
            "The nbaccel state was reset after this object was created; create a new "
            "PartialState() (or Accelerator()) to read the current state."
        )
    return record
