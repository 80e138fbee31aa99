"""The config file's ``fsdp_config`` keys (and the guide's other spellings) -> plugin arguments."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.fsdp import FsdpConfig, convert_to_fsdp2
from ..config.values import ValueProblem, as_bool

__all__ = ["KEY_TO_ARGUMENT", "plugin_kwargs"]

# Other spellings seen in the Transformers guide and in TrainingArguments.fsdp_config.
_ALIASES = {
    "fsdp_wrap_policy": "fsdp_auto_wrap_policy",
    "min_num_param": "fsdp_min_num_params",
    "fsdp_min_num_param": "fsdp_min_num_params",
}
_XLA_KEYS = ("xla", "xla_fsdp_settings", "xla_fsdp_grad_ckpt")

KEY_TO_ARGUMENT = {
    "fsdp_version": "fsdp_version",
    "fsdp_sharding_strategy": "sharding_strategy",
    "fsdp_reshard_after_forward": "reshard_after_forward",
    "fsdp_auto_wrap_policy": "auto_wrap_policy",
    "fsdp_transformer_layer_cls_to_wrap": "transformer_cls_names_to_wrap",
    "fsdp_min_num_params": "min_num_params",
    "fsdp_offload_params": "cpu_offload",
    "fsdp_state_dict_type": "state_dict_type",
    "fsdp_cpu_ram_efficient_loading": "cpu_ram_efficient_loading",
    "fsdp_activation_checkpointing": "activation_checkpointing",
    "fsdp_backward_prefetch": "backward_prefetch",
    "fsdp_forward_prefetch": "forward_prefetch",
    "fsdp_use_orig_params": "use_orig_params",
    "fsdp_sync_module_states": "sync_module_states",
}


def _canonical(key: str) -> str:
    key = _ALIASES.get(key, key)
    if key in _XLA_KEYS or key.startswith("fsdp_") or key == "fsdp_backward_prefetch_policy":
        return key
    return _ALIASES.get(f"fsdp_{key}", f"fsdp_{key}")  # TrainingArguments drops the prefix


def _split(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(fsdp_* keys for FsdpConfig, XLA settings)."""
    fsdp: dict[str, Any] = {}
    xla: dict[str, Any] = {}
    for raw_key, value in config.items():
        key = _canonical(str(raw_key))
        target = xla if key in _XLA_KEYS else fsdp
        if key in target:
            raise ValueError(f"fsdp_config gives {key!r} twice (as {raw_key!r}); keep one.")
        target[key] = value
    return fsdp, xla


def _xla_kwargs(xla: dict[str, Any]) -> dict[str, Any]:
    settings = dict(xla.get("xla_fsdp_settings") or {})
    grad_ckpt = xla.get("xla_fsdp_grad_ckpt", settings.pop("xla_fsdp_grad_ckpt", False))
    try:
        return {
            "xla": as_bool(xla.get("xla", False)),
            "xla_fsdp_settings": settings or None,
            "xla_fsdp_grad_ckpt": as_bool(grad_ckpt),
        }
    except ValueProblem as problem:
        raise ValueError(f"fsdp_config XLA setting: {problem}") from None


def plugin_kwargs(config: Mapping[str, Any], to_fsdp2: bool = False) -> dict[str, Any]:
    """Plugin keyword arguments for ``config``; ``to_fsdp2`` converts a version-1 config."""
    fsdp, xla = _split(config)
    try:
        checked = FsdpConfig(fsdp)
    except ValueProblem as problem:
        raise ValueError(f"fsdp_config: {problem}") from None
    if to_fsdp2:
        checked, _notes = convert_to_fsdp2(checked)
    kwargs = {KEY_TO_ARGUMENT[k]: v for k, v in checked.values.items()}
    if kwargs.get("cpu_offload") is False:
        kwargs.pop("cpu_offload")
    names = kwargs.get("transformer_cls_names_to_wrap")
    if isinstance(names, str):
        kwargs["transformer_cls_names_to_wrap"] = [n.strip() for n in names.split(",")]
    kwargs.update(_xla_kwargs(xla))
    return kwargs
