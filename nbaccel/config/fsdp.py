"""The ``fsdp_config`` section of a config file: its keys, versions 1 and 2, and ``to-fsdp2``.

nbaccel validates and carries these settings (the launcher passes them to the script in the
resolved config); sharding itself is the FSDP plugin's job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ..validation import is_int
from .values import ValueProblem, as_bool, as_choice, as_int, as_str

__all__ = [
    "FSDP_ALIASES",
    "FSDP_KEYS",
    "FSDP_V1_ONLY",
    "SHARDING_STRATEGIES",
    "XLA_KEYS",
    "FsdpConfig",
    "convert_to_fsdp2",
]

SHARDING_STRATEGIES = (
    "FULL_SHARD",
    "SHARD_GRAD_OP",
    "NO_SHARD",
    "HYBRID_SHARD",
    "HYBRID_SHARD_ZERO2",
)
WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")
PREFETCH = ("BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH")
STATE_DICT_TYPES = ("FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT")


def _strategy(value: Any) -> str:
    """A sharding strategy by name or by the number ``accelerate config`` offers (1-5)."""
    if is_int(value):
        if 1 <= value <= len(SHARDING_STRATEGIES):
            return SHARDING_STRATEGIES[value - 1]
        raise ValueProblem(
            f"{value} is not a strategy number; use 1-5 or {list(SHARDING_STRATEGIES)}"
        )
    if isinstance(value, str) and value.strip().isdigit():
        return _strategy(int(value.strip()))
    return as_choice(value, SHARDING_STRATEGIES)


def _reshard(value: Any) -> bool | str:
    """Version 2: True/False. Version 1 also accepts a sharding strategy name."""
    try:
        return as_bool(value)
    except ValueProblem:
        return _strategy(value)


def _classes(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    text = as_str(value)
    if not text.strip():
        raise ValueProblem("give at least one class name, e.g. 'BertLayer'")
    return text


def _version(value: Any) -> int:
    version = as_int(value, minimum=1)
    if version not in (1, 2):
        raise ValueProblem(f"{version} is not an FSDP version; use 1 or 2")
    return version


# key -> (parser, meaning)
FSDP_KEYS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "fsdp_version": (_version, "1 (FullyShardedDataParallel) or 2 (fully_shard)"),
    "fsdp_sharding_strategy": (_strategy, f"version 1: {', '.join(SHARDING_STRATEGIES)} or 1-5"),
    "fsdp_reshard_after_forward": (_reshard, "version 2: free parameters after forward (bool)"),
    "fsdp_auto_wrap_policy": (
        lambda v: as_choice(v, WRAP_POLICIES),
        f"which submodules are wrapped: {', '.join(WRAP_POLICIES)}",
    ),
    "fsdp_transformer_layer_cls_to_wrap": (_classes, "layer class names (comma separated)"),
    "fsdp_min_num_params": (lambda v: as_int(v, minimum=0), "parameters for SIZE_BASED_WRAP"),
    "fsdp_offload_params": (as_bool, "keep parameters and gradients on the CPU when unused"),
    "fsdp_state_dict_type": (
        lambda v: as_choice(v, STATE_DICT_TYPES),
        f"checkpoint layout: {', '.join(STATE_DICT_TYPES)}",
    ),
    "fsdp_cpu_ram_efficient_loading": (as_bool, "load weights on rank 0 only, then broadcast"),
    "fsdp_activation_checkpointing": (as_bool, "recompute activations in backward"),
    "fsdp_activation_checkpointing_offload": (
        as_bool,
        "version 2: keep the checkpointed layers' inputs on the CPU",
    ),
    "fsdp_backward_prefetch": (
        lambda v: as_choice(v, PREFETCH),
        f"version 1: {', '.join(PREFETCH)}",
    ),
    "fsdp_backward_prefetch_policy": (
        lambda v: as_choice(v, PREFETCH),
        "old name of fsdp_backward_prefetch",
    ),
    "fsdp_forward_prefetch": (as_bool, "version 1: prefetch the next all-gather in forward"),
    "fsdp_use_orig_params": (as_bool, "version 1: keep the original parameters visible"),
    "fsdp_sync_module_states": (as_bool, "version 1: broadcast rank 0's weights at wrap time"),
}

# Other spellings of the Transformers FSDP guide (and TrainingArguments.fsdp_config).
FSDP_ALIASES = {
    "fsdp_wrap_policy": "fsdp_auto_wrap_policy",
    "min_num_param": "fsdp_min_num_params",
    "fsdp_min_num_param": "fsdp_min_num_params",
}


def _xla_settings(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueProblem(f"has the value {value!r}, which is not a mapping of XLA FSDP options")
    return {str(k): v for k, v in value.items()}


# The guide's TPU keys: FSDP through torch_xla (``XlaFullyShardedDataParallel``).
XLA_KEYS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "xla": (as_bool, "TPU only: shard with torch_xla's XlaFullyShardedDataParallel"),
    "xla_fsdp_settings": (_xla_settings, "TPU only: keyword arguments for the XLA FSDP wrapper"),
    "xla_fsdp_grad_ckpt": (as_bool, "TPU only: gradient checkpointing of each wrapped layer"),
}

# Keys that only version 1 knows; version 2 (``fully_shard``) has no such setting.
FSDP_V1_ONLY = (
    "fsdp_sharding_strategy",
    "fsdp_backward_prefetch",
    "fsdp_backward_prefetch_policy",
    "fsdp_forward_prefetch",
    "fsdp_use_orig_params",
    "fsdp_sync_module_states",
)


@dataclasses.dataclass(frozen=True)
class FsdpConfig:
    """The validated ``fsdp_config`` mapping (keys as in Accelerate's config file).

    Raises:
        ValueProblem: (with ``key`` set) a key is unknown, a value bad, or a key belongs to
            the other FSDP version.
    """

    values: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        checked: dict[str, Any] = {}
        parsers = {**FSDP_KEYS, **XLA_KEYS}
        for given, raw in dict(self.values).items():
            key = FSDP_ALIASES.get(str(given), str(given))
            if key not in parsers:
                known = (*parsers, *FSDP_ALIASES)
                raise ValueProblem("is not an fsdp_config key", key=given, known=known)
            if key in checked:
                raise ValueProblem(f"gives {key} a second time; keep one spelling", key=given)
            try:
                checked[key] = parsers[key][0](raw)
            except ValueProblem as problem:
                raise problem.at(str(given)) from None
        nested = checked.get("xla_fsdp_settings", {}).pop("xla_fsdp_grad_ckpt", None)
        if nested is not None:  # the guide's YAML puts it under xla_fsdp_settings too
            checked.setdefault("xla_fsdp_grad_ckpt", _parse_nested_ckpt(nested))
        if "fsdp_backward_prefetch_policy" in checked:
            old = checked.pop("fsdp_backward_prefetch_policy")
            checked.setdefault("fsdp_backward_prefetch", old)
        version = checked.get("fsdp_version", 1)
        if version == 2:
            for key in FSDP_V1_ONLY:
                if key in checked:
                    raise ValueProblem(
                        "belongs to FSDP version 1 but fsdp_version is 2; convert the file "
                        "with `nbaccel to-fsdp2`",
                        key=key,
                    )
            reshard = checked.get("fsdp_reshard_after_forward")
            if isinstance(reshard, str):
                raise ValueProblem(
                    "must be true or false with fsdp_version 2", key="fsdp_reshard_after_forward"
                )
        object.__setattr__(self, "values", checked)

    @property
    def version(self) -> int:
        """1 or 2."""
        return int(self.values.get("fsdp_version", 1))

    def to_dict(self) -> dict[str, Any]:
        """The mapping as written to a file."""
        return dict(self.values)

    def for_processes(self, cpu: bool) -> dict[str, Any]:
        """The mapping a launcher hands its processes: on the CPU, ``fsdp_offload_params`` is
        dropped (the parameters already live there; offloading needs an accelerator)."""
        values = dict(self.values)
        if cpu and values.get("fsdp_offload_params"):
            values["fsdp_offload_params"] = False
        return values

    def describe(self, cpu: bool = False) -> str:
        """What the processes run, in one line (for the launch banners)."""
        values = self.values
        parts = [f"version {self.version}"]
        if self.version == 1:
            parts.append(values.get("fsdp_sharding_strategy", "FULL_SHARD"))
        else:
            reshard = values.get("fsdp_reshard_after_forward", True)
            parts.append(f"reshard_after_forward={str(reshard).lower()}")
        policy = values.get("fsdp_auto_wrap_policy", "NO_WRAP")
        if policy == "TRANSFORMER_BASED_WRAP":
            policy += f" [{values.get('fsdp_transformer_layer_cls_to_wrap', 'from the model')}]"
        elif policy == "SIZE_BASED_WRAP":
            policy += f" [min_num_params={values.get('fsdp_min_num_params', 100_000_000)}]"
        parts += [policy, values.get("fsdp_state_dict_type", "FULL_STATE_DICT")]
        for key, label in (
            ("fsdp_offload_params", "offload params"),
            ("fsdp_cpu_ram_efficient_loading", "RAM-efficient loading"),
            ("fsdp_activation_checkpointing", "activation checkpointing"),
            ("fsdp_activation_checkpointing_offload", "activations offloaded"),
            ("xla", "XLA (TPU)"),
        ):
            if values.get(key):
                parts.append(label)
        if cpu and values.get("fsdp_offload_params"):
            parts[parts.index("offload params")] = "offload params dropped (CPU run)"
        return ", ".join(parts)


def _parse_nested_ckpt(value: Any) -> bool:
    try:
        return bool(as_bool(value))
    except ValueProblem as problem:
        raise problem.at("xla_fsdp_settings.xla_fsdp_grad_ckpt") from None


_RESHARD = {
    "FULL_SHARD": True,
    "SHARD_GRAD_OP": False,
    "NO_SHARD": False,
    "HYBRID_SHARD": True,
    "HYBRID_SHARD_ZERO2": False,
}


def convert_to_fsdp2(config: FsdpConfig) -> tuple[FsdpConfig, list[str]]:
    """The version-2 form of a version-1 ``fsdp_config``, and notes on what changed.

    ``fsdp_sharding_strategy`` becomes ``fsdp_reshard_after_forward`` (FULL_SHARD and
    HYBRID_SHARD reshard, the others do not); keys that version 2 has no setting for are
    dropped and named in the notes. A version-2 config comes back unchanged.
    """
    if config.version == 2:
        return config, ["fsdp_config is already version 2; nothing to convert"]
    values = dict(config.values)
    notes: list[str] = []
    out: dict[str, Any] = {"fsdp_version": 2}
    strategy = values.pop("fsdp_sharding_strategy", None)
    reshard = values.pop("fsdp_reshard_after_forward", None)
    if isinstance(reshard, str):
        strategy = strategy or reshard
        reshard = None
    if strategy is not None:
        out["fsdp_reshard_after_forward"] = _RESHARD[strategy]
        notes.append(
            f"fsdp_sharding_strategy: {strategy} -> fsdp_reshard_after_forward: "
            f"{str(_RESHARD[strategy]).lower()}"
        )
    elif reshard is not None:
        out["fsdp_reshard_after_forward"] = reshard
    values.pop("fsdp_version", None)
    for key in FSDP_V1_ONLY:
        if key in values:
            notes.append(f"{key} dropped: FSDP version 2 has no such setting")
            values.pop(key)
    if values.get("fsdp_state_dict_type") == "LOCAL_STATE_DICT":
        values["fsdp_state_dict_type"] = "SHARDED_STATE_DICT"
        notes.append("fsdp_state_dict_type: LOCAL_STATE_DICT -> SHARDED_STATE_DICT")
    out.update(values)
    return FsdpConfig(out), notes
