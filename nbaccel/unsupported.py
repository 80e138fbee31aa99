"""Accelerate's DeepSpeed and Megatron-LM plugins: the names exist (``isinstance`` checks and
imports work), constructing one raises an error that says what to use instead."""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = ["DeepSpeedPlugin", "FP8RecipeKwargs", "MegatronLMPlugin"]

_INSTEAD = (
    "nbaccel does not run {engine}. For sharded training on one or many machines use FSDP: "
    "Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(...)) (ZeRO-3 corresponds to "
    "sharding_strategy='FULL_SHARD', ZeRO-2 to 'SHARD_GRAD_OP'; cpu_offload=True offloads), "
    "or plain data parallelism (DDP) with no plugin. See docs/compatibility.md."
)


class _Refused:
    engine = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _refuse(self.engine)


def _refuse(engine: str) -> NoReturn:
    raise NotImplementedError(_INSTEAD.format(engine=engine))


class DeepSpeedPlugin(_Refused):
    """Accelerate's DeepSpeed plugin. nbaccel does not run DeepSpeed: constructing it raises
    ``NotImplementedError`` pointing to ``FullyShardedDataParallelPlugin``."""

    engine = "DeepSpeed"


class MegatronLMPlugin(_Refused):
    """Accelerate's Megatron-LM plugin. nbaccel does not run Megatron-LM: constructing it
    raises ``NotImplementedError`` pointing to ``FullyShardedDataParallelPlugin``."""

    engine = "Megatron-LM"


class FP8RecipeKwargs:
    """Accelerate's fp8 recipe for Transformer Engine / MS-AMP. nbaccel runs neither:
    constructing it raises ``NotImplementedError`` pointing to ``mixed_precision="fp8"``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "FP8RecipeKwargs configures Transformer Engine or MS-AMP fp8 recipes, which nbaccel "
            'does not run. Use Accelerator(mixed_precision="fp8"): nbaccel trains in fp8 with '
            "torchao's float8 linear layers (pip install torchao). See docs/compatibility.md."
        )
