"""How a model is wrapped and its gradients synchronised: one small class per setup."""

from __future__ import annotations

from typing import Any

from ..enums import DistributedType
from ..state.registry import STATE
from .base import Strategy
from .ddp import DDPStrategy
from .deepspeed import DeepSpeedStrategy
from .fsdp import FSDPStrategy
from .xla import XlaStrategy, xla_fsdp_strategy

__all__ = [
    "DDPStrategy",
    "DeepSpeedStrategy",
    "FSDPStrategy",
    "Strategy",
    "XlaStrategy",
    "strategy_for",
]


def strategy_for(
    distributed_type: DistributedType, fsdp_plugin: Any = None, deepspeed_plugin: Any = None
) -> Strategy:
    """The strategy for a distributed type (FSDP needs its ``FullyShardedDataParallelPlugin``;
    DeepSpeed a function that returns the selected ``DeepSpeedPlugin``)."""
    if distributed_type == DistributedType.DEEPSPEED and deepspeed_plugin is not None:
        return DeepSpeedStrategy(deepspeed_plugin)
    if distributed_type == DistributedType.FSDP:
        if fsdp_plugin is None:
            raise ValueError(
                "DistributedType.FSDP needs fsdp_plugin=FullyShardedDataParallelPlugin()."
            )
        if _on_xla_device():
            return xla_fsdp_strategy(fsdp_plugin)
        return FSDPStrategy(fsdp_plugin)
    if distributed_type in (DistributedType.MULTI_CPU, DistributedType.MULTI_GPU):
        return DDPStrategy()
    if distributed_type == DistributedType.XLA:
        return XlaStrategy()
    if distributed_type == DistributedType.NO:
        return Strategy()
    raise NotImplementedError(
        f"Training with DistributedType.{distributed_type.name} is not available in this "
        "version of nbaccel; without fsdp_plugin, several processes train with DDP."
    )


def _on_xla_device() -> bool:
    """True when this process trains on the XLA device (whatever plugin the job reports)."""

    return STATE.process is not None and STATE.process.distributed_type == DistributedType.XLA
