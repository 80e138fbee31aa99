"""The line printed before a launch's or a pool's ranks on this machine start."""

from __future__ import annotations

from ...config.deepspeed import DeepSpeedConfig
from ...config.fsdp import FsdpConfig
from ...environment import hardware_description
from ..config import LaunchConfig

__all__ = ["banner"]


def banner(config: LaunchConfig, method: str, verb: str = "Launching") -> str:
    """The line printed before the workers start: how many, on what hardware, how."""
    backend = "gloo" if config.cpu else "nccl"
    where = hardware_description(gpus=not config.cpu)
    nodes = f" on node {config.node_rank} of {config.num_nodes}" if config.multi_node else ""
    precision = ""
    if config.mixed_precision != "no":
        precision = f", mixed precision {config.mixed_precision}"
        if config.precision_falls_back:  # the warning above says why
            precision += " (trains in fp32 on the CPU)"
    count = config.num_processes
    if config.fsdp_config is not None:
        precision += f", FSDP ({FsdpConfig(config.fsdp_config).describe(config.cpu)})"
    if config.deepspeed_config is not None:
        precision += f", DeepSpeed ({DeepSpeedConfig(config.deepspeed_config).describe()})"
    return f"{verb} {count} processes on {where}{nodes} with {method} ({backend}){precision}."
