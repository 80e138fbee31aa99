"""Parsers that turn the FSDP plugin's loose inputs (names, numbers, dicts) into torch objects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.distributed.fsdp import (
    BackwardPrefetch,
    CPUOffload,
    CPUOffloadPolicy,
    FullOptimStateDictConfig,
    FullStateDictConfig,
    LocalOptimStateDictConfig,
    LocalStateDictConfig,
    MixedPrecision,
    MixedPrecisionPolicy,
    ShardedOptimStateDictConfig,
    ShardedStateDictConfig,
    ShardingStrategy,
    StateDictType,
)

from ..validation import is_int

__all__ = [
    "RESHARD_FOR_STRATEGY",
    "SHARDING_NAMES",
    "WRAP_POLICY_NAMES",
    "parse_backward_prefetch",
    "parse_cpu_offload",
    "parse_dtype",
    "parse_mixed_precision",
    "parse_sharding_strategy",
    "parse_state_dict_type",
    "state_dict_configs",
]

# The order of ``accelerate config``'s numbers 1-5 (the Transformers FSDP guide's).
SHARDING_NAMES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
_TORCH_NAMES = {"HYBRID_SHARD_ZERO2": "_HYBRID_SHARD_ZERO2"}
# The documented mapping of the deprecated sharding_strategy onto reshard_after_forward (FSDP2).
RESHARD_FOR_STRATEGY = {
    "FULL_SHARD": True,
    "SHARD_GRAD_OP": False,
    "NO_SHARD": False,
    "HYBRID_SHARD": True,
    "HYBRID_SHARD_ZERO2": False,
}
WRAP_POLICY_NAMES = ("transformer_based_wrap", "size_based_wrap", "no_wrap")
_DTYPES = {
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp32": torch.float32,
    "float32": torch.float32,
    "float": torch.float32,
}


def strategy_name(strategy: ShardingStrategy) -> str:
    """The documented name of a torch ``ShardingStrategy`` (``HYBRID_SHARD_ZERO2``...)."""
    return strategy.name.lstrip("_")


def parse_sharding_strategy(value: Any, argument: str = "sharding_strategy") -> ShardingStrategy:
    """A ``ShardingStrategy`` from its enum, its name (any case) or the number 1-5."""
    if isinstance(value, ShardingStrategy):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if is_int(value):
        if 1 <= value <= len(SHARDING_NAMES):
            value = SHARDING_NAMES[value - 1]
        else:
            raise ValueError(
                f"{argument}={value} is not a sharding strategy number; use 1-5 "
                f"({', '.join(f'{i + 1}={n}' for i, n in enumerate(SHARDING_NAMES))})."
            )
    if isinstance(value, str):
        name = value.strip().upper().replace(" ", "_")
        if name in SHARDING_NAMES:
            return ShardingStrategy[_TORCH_NAMES.get(name, name)]
    raise ValueError(
        f"{argument}={value!r} is not a sharding strategy; use one of {list(SHARDING_NAMES)}, "
        "the numbers 1-5, or a torch.distributed.fsdp.ShardingStrategy."
    )


def parse_backward_prefetch(value: Any) -> BackwardPrefetch | None:
    """``BackwardPrefetch`` from its enum or name; ``NO_PREFETCH`` and None mean no prefetch."""
    if value is None or isinstance(value, BackwardPrefetch):
        return value
    if isinstance(value, str):
        name = value.strip().upper()
        if name == "NO_PREFETCH":
            return None
        if name in BackwardPrefetch.__members__:
            return BackwardPrefetch[name]
    raise ValueError(
        f"backward_prefetch={value!r} is not allowed; use 'BACKWARD_PRE', 'BACKWARD_POST', "
        "'NO_PREFETCH' (or None) or a torch.distributed.fsdp.BackwardPrefetch."
    )


def parse_state_dict_type(value: Any) -> StateDictType:
    """``StateDictType`` from its enum or name in any case (``sharded_state_dict``...)."""
    if isinstance(value, StateDictType):
        return value
    if isinstance(value, str) and value.strip().upper() in StateDictType.__members__:
        return StateDictType[value.strip().upper()]
    raise ValueError(
        f"state_dict_type={value!r} is not allowed; use 'FULL_STATE_DICT', "
        "'SHARDED_STATE_DICT' or 'LOCAL_STATE_DICT' (any case) or a StateDictType."
    )


def state_dict_configs(kind: StateDictType) -> tuple[Any, Any]:
    """The model and optimizer state-dict configs that ``kind`` implies (as Accelerate's)."""
    if kind == StateDictType.FULL_STATE_DICT:
        return (
            FullStateDictConfig(offload_to_cpu=True, rank0_only=True),
            FullOptimStateDictConfig(offload_to_cpu=True, rank0_only=True),
        )
    if kind == StateDictType.SHARDED_STATE_DICT:
        return ShardedStateDictConfig(offload_to_cpu=True), ShardedOptimStateDictConfig(
            offload_to_cpu=True
        )
    return LocalStateDictConfig(offload_to_cpu=True), LocalOptimStateDictConfig(offload_to_cpu=True)


def parse_dtype(value: Any, key: str) -> torch.dtype | None:
    """A floating dtype from a ``torch.dtype`` or a name such as ``bf16`` / ``bfloat16``."""
    if value is None or isinstance(value, torch.dtype):
        return value
    if isinstance(value, str):
        name = value.strip().lower().removeprefix("torch.")
        if name in _DTYPES:
            return _DTYPES[name]
    raise ValueError(
        f"mixed_precision_policy[{key!r}]={value!r} is not a dtype; use torch.float16, "
        "torch.bfloat16, torch.float32 or a name such as 'bf16', 'fp16', 'fp32'."
    )


_V1_KEYS = ("param_dtype", "reduce_dtype", "buffer_dtype")
_V2_KEYS = ("param_dtype", "reduce_dtype", "output_dtype")
_FLAGS = ("keep_low_precision_grads", "cast_forward_inputs", "cast_root_forward_inputs")


def parse_mixed_precision(value: Any, version: int) -> MixedPrecision | MixedPrecisionPolicy | None:
    """The torch mixed-precision object for ``version`` from a dict or a torch object."""
    if value is None:
        return None
    wanted = MixedPrecision if version == 1 else MixedPrecisionPolicy
    if isinstance(value, (MixedPrecision, MixedPrecisionPolicy)):
        if not isinstance(value, wanted):
            raise ValueError(
                f"mixed_precision_policy is a {type(value).__name__} but fsdp_version={version} "
                f"needs a {wanted.__name__} (or a dict of param_dtype/reduce_dtype/...)."
            )
        return value
    if not isinstance(value, Mapping):
        raise ValueError(
            f"mixed_precision_policy={value!r} is not allowed; pass a dict with param_dtype, "
            f"reduce_dtype and buffer_dtype, or a {wanted.__name__}."
        )
    keys = _V1_KEYS if version == 1 else _V2_KEYS
    allowed = keys + (_FLAGS if version == 1 else ("cast_forward_inputs",))
    unknown = [k for k in value if k not in allowed]
    if unknown:
        hint = " (FSDP2 keeps buffers in their own dtype)" if "buffer_dtype" in unknown else ""
        raise ValueError(
            f"mixed_precision_policy has keys {unknown} that fsdp_version={version} does not "
            f"know{hint}; allowed: {list(allowed)}."
        )
    args: dict[str, Any] = {
        k: (parse_dtype(v, k) if k in keys else bool(v)) for k, v in value.items()
    }
    return wanted(**args)


def parse_cpu_offload(value: Any, version: int) -> CPUOffload | CPUOffloadPolicy | None:
    """The torch offload object for ``version`` (None when offloading is off)."""
    if value is None or value is False:
        return None
    if value is True:
        return CPUOffload(offload_params=True) if version == 1 else CPUOffloadPolicy()
    if version == 1 and isinstance(value, CPUOffload):
        return value if value.offload_params else None
    if version == 2 and isinstance(value, CPUOffloadPolicy):
        return value
    wanted = "CPUOffload" if version == 1 else "CPUOffloadPolicy"
    raise ValueError(
        f"cpu_offload={value!r} is not allowed with fsdp_version={version}; use True/False or a "
        f"torch.distributed.fsdp.{wanted}."
    )
