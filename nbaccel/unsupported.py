"""What nbaccel does not run, the one error that says so, and what to use instead.

Every refusal (Accelerate's Megatron-LM plugin and arguments, tensor, context,
sequence and pipeline parallelism, fp8 recipes of other engines) goes
through :func:`refuse`, which names what the user called, the engine, and the replacement from
the one table :data:`INSTEAD`. The plugin classes exist so that imports and ``isinstance``
checks of Accelerate code work; constructing one refuses.
"""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = [
    "INSTEAD",
    "FP8RecipeKwargs",
    "MegatronLMPlugin",
    "refuse",
    "refuse_plugins",
]

_FSDP = (
    "For sharded training on one or many machines use FSDP: "
    "Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(...)) (ZeRO-3 corresponds to "
    "sharding_strategy='FULL_SHARD', ZeRO-2 to 'SHARD_GRAD_OP'; cpu_offload=True offloads), "
    "or plain data parallelism (DDP) with no plugin"
)
_DATA_PARALLEL = (
    "Train with data parallelism (DDP) or shard the model with FSDP: "
    "fsdp_plugin=FullyShardedDataParallelPlugin(...) and "
    "ParallelismConfig(dp_shard_size=<processes>), or leave parallelism_config out"
)

# engine -> what to use instead
INSTEAD: dict[str, str] = {
    "Megatron-LM": _FSDP.replace(
        "or plain data parallelism",
        "DeepSpeed's ZeRO: deepspeed_plugin=DeepSpeedPlugin(...), or plain data parallelism",
    ),
    "tensor, context or sequence parallelism": _DATA_PARALLEL,
    "pipeline parallelism": _DATA_PARALLEL,
    "Transformer Engine or MS-AMP fp8 recipes": (
        'Use Accelerator(mixed_precision="fp8"): nbaccel trains in fp8 with torchao\'s float8 '
        "linear layers (pip install torchao)"
    ),
}


def refuse(engine: str, asked: str) -> NoReturn:
    """Raise ``NotImplementedError`` for ``asked`` (what the user called), which needs
    ``engine`` (a key of :data:`INSTEAD`); the message says what to use instead."""
    raise NotImplementedError(
        f"{asked}: nbaccel does not run {engine}. {INSTEAD[engine]}. See docs/compatibility.md."
    )


# Accelerate's plugin arguments that nbaccel refuses, and the engine each needs.
_PLUGIN_ENGINES = {
    "megatron_lm_plugin": "Megatron-LM",
    "torch_tp_plugin": "tensor, context or sequence parallelism",
}


def refuse_plugins(owner: str, **plugins: Any) -> None:
    """Refuse the first of Accelerate's engine plugins given to ``owner`` (``Accelerator`` or
    ``AcceleratorState``); None means not given."""
    for name, value in plugins.items():
        if value is not None:
            refuse(_PLUGIN_ENGINES[name], f"{owner}({name}=...)")


class _Refused:
    engine = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        refuse(self.engine, f"{type(self).__name__}(...)")


class MegatronLMPlugin(_Refused):
    """Accelerate's Megatron-LM plugin. nbaccel does not run Megatron-LM: constructing it
    raises ``NotImplementedError`` pointing to ``FullyShardedDataParallelPlugin``."""

    engine = "Megatron-LM"


class FP8RecipeKwargs(_Refused):
    """Accelerate's fp8 recipe for Transformer Engine / MS-AMP. nbaccel runs neither:
    constructing it raises ``NotImplementedError`` pointing to ``mixed_precision="fp8"``."""

    engine = "Transformer Engine or MS-AMP fp8 recipes"
