"""Process layouts for FSDP: one flat mesh, or (replicate, shard) groups for hybrid sharding."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from ..state import PartialState

__all__ = ["check_not_offloading_on_cpu", "hybrid_mesh", "world_size"]


def world_size() -> int:
    """Processes in the default group (1 without a process group)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _default_group_size(world: int) -> int:
    """The processes of one machine (torch's HYBRID_SHARD default), when they divide evenly."""

    local = PartialState().local_num_processes
    return local if local >= 1 and world % local == 0 else world


def hybrid_mesh(device: torch.device, group_size: int | None) -> DeviceMesh:
    """A 2-D mesh ``(replicate, shard)``: ``group_size`` processes shard together (default:
    the processes of one machine); the groups replicate each other."""
    world = world_size()
    size = _default_group_size(world) if group_size is None else group_size
    if size < 1 or world % size != 0:
        raise ValueError(
            f"fsdp_group_size={size} does not divide the {world} processes into equal groups; "
            f"use a divisor of {world}."
        )
    return init_device_mesh(
        device.type, (world // size, size), mesh_dim_names=("replicate", "shard")
    )


def check_not_offloading_on_cpu(offload: object, device: torch.device) -> None:
    """CPU offload needs an accelerator (torch moves shards between it and the CPU)."""
    if offload is not None and device.type == "cpu":
        raise ValueError(
            "cpu_offload is set, but this process trains on the CPU: offloading moves "
            "parameters from an accelerator (GPU) to the CPU, and torch needs an accelerator "
            "for it. Drop cpu_offload (fsdp_offload_params) on CPU-only machines."
        )
