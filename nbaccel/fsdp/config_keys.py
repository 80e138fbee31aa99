"""The config file's ``fsdp_config`` keys (and the guide's other spellings) -> plugin arguments,
and the FSDP settings of the launch that started this process."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.fsdp import FSDP_ALIASES, XLA_KEYS, FsdpConfig, convert_to_fsdp2
from ..config.values import ValueProblem
from ..environment import read_fsdp_launch, read_launch_environment

__all__ = ["KEY_TO_ARGUMENT", "launch_plugin_kwargs", "launched_with_fsdp", "plugin_kwargs"]

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
    "fsdp_activation_checkpointing_offload": "activation_checkpointing_offload",
    "fsdp_backward_prefetch": "backward_prefetch",
    "fsdp_forward_prefetch": "forward_prefetch",
    "fsdp_use_orig_params": "use_orig_params",
    "fsdp_sync_module_states": "sync_module_states",
    "xla": "xla",
    "xla_fsdp_settings": "xla_fsdp_settings",
    "xla_fsdp_grad_ckpt": "xla_fsdp_grad_ckpt",
}


def _canonical(key: str) -> str:
    if key in FSDP_ALIASES or key in XLA_KEYS or key.startswith("fsdp_"):
        return key
    return f"fsdp_{key}"  # TrainingArguments.fsdp_config drops the prefix


def plugin_kwargs(config: Mapping[str, Any], to_fsdp2: bool = False) -> dict[str, Any]:
    """Plugin keyword arguments for ``config``; ``to_fsdp2`` converts a version-1 config.

    Raises:
        ValueError: naming the key whose value is wrong or unknown.
    """
    try:
        checked = FsdpConfig({_canonical(str(k)): v for k, v in config.items()})
    except ValueProblem as problem:
        raise ValueError(f"fsdp_config: {problem}") from None
    if to_fsdp2:
        checked, _notes = convert_to_fsdp2(checked)
    values = dict(checked.values)
    if "fsdp_sharding_strategy" in values:  # the strategy wins over a version-1 reshard value
        values.pop("fsdp_reshard_after_forward", None)
    kwargs = {KEY_TO_ARGUMENT[k]: v for k, v in values.items()}
    if "sharding_strategy" in kwargs:  # a file's strategy is no deprecated plugin argument:
        kwargs["reshard_after_forward"] = kwargs.pop("sharding_strategy")  # version 1's form
    names = kwargs.get("transformer_cls_names_to_wrap")
    if isinstance(names, str):
        kwargs["transformer_cls_names_to_wrap"] = [n.strip() for n in names.split(",")]
    if kwargs.get("xla_fsdp_settings") == {}:
        kwargs["xla_fsdp_settings"] = None
    return kwargs


def launched_with_fsdp() -> bool:
    """True when a launcher started this process and asked for FSDP, whatever the number of
    processes (a process started on its own trains without FSDP: ``state/rules.py``)."""
    return read_launch_environment().launched and read_fsdp_launch() is not None


def launch_plugin_kwargs(fsdp_version: int | None = None) -> dict[str, Any]:
    """The launch's FSDP settings as plugin arguments ({} when it gave none), in the form of
    ``fsdp_version`` when given (a version-1 launch is converted for a version-2 plugin)."""
    config = read_fsdp_launch()
    if not config:
        return {}
    kwargs = plugin_kwargs(config)
    launched = kwargs.get("fsdp_version", 1)
    if fsdp_version == 2 and launched == 1:
        kwargs = plugin_kwargs(config, to_fsdp2=True)
    elif fsdp_version == 1 and launched == 2:
        kwargs.pop("reshard_after_forward", None)  # True/False has no version-1 meaning
    if fsdp_version is not None:
        kwargs.pop("fsdp_version", None)
    return kwargs
