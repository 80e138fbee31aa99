""" "Show code": the ``notebook_launcher(...)`` / ``Accelerator(...)`` call equal to the panel."""

from __future__ import annotations

from typing import Any

from ..fsdp.config_keys import KEY_TO_ARGUMENT
from .form import PanelValues, launch_options

__all__ = [
    "FSDP_ARGUMENTS",
    "accelerator_options",
    "deepspeed_options",
    "plugin_options",
    "show_code",
]

# fsdp_config key -> FullyShardedDataParallelPlugin argument (Accelerate's names)
FSDP_ARGUMENTS = KEY_TO_ARGUMENT


def plugin_options(values: PanelValues) -> dict[str, Any]:
    """``FullyShardedDataParallelPlugin`` keyword arguments (empty without FSDP)."""
    out: dict[str, Any] = {}
    for key, value in values.fsdp_mapping().items():
        if key == "fsdp_transformer_layer_cls_to_wrap":
            value = [name.strip() for name in str(value).split(",") if name.strip()]
        elif key == "fsdp_auto_wrap_policy":
            value = str(value).lower()
        out[FSDP_ARGUMENTS[key]] = value
    return out


def deepspeed_options(values: PanelValues) -> dict[str, Any]:
    """``DeepSpeedPlugin`` keyword arguments (empty without DeepSpeed)."""
    return values.deepspeed_arguments()


def accelerator_options(values: PanelValues) -> dict[str, Any]:
    """``Accelerator`` keyword arguments, the plugins aside (defaults left out)."""
    out: dict[str, Any] = {}
    if values.mixed_precision != "no":
        out["mixed_precision"] = values.mixed_precision
    if values.gradient_accumulation_steps != 1:
        out["gradient_accumulation_steps"] = values.gradient_accumulation_steps
    if values.device == "cpu":
        out["cpu"] = True
    return out


def _call(name: str, options: dict[str, Any], indent: str, extra: str = "", to: str = "") -> str:
    """``name(...)`` on one line where it fits in 100 characters, else one argument a line;
    ``to``: the variable it is assigned to."""
    parts = [*([extra] if extra else []), *(f"{k}={v!r}" for k, v in options.items())]
    head = f"{indent}{to} = {name}(" if to else f"{indent}{name}("
    one_line = f"{head}{', '.join(parts)})"
    if len(one_line) <= 100:
        return one_line
    inner = "".join(f"{indent}    {part},\n" for part in parts)
    return f"{head}\n{inner}{indent})"


def show_code(values: PanelValues, function_name: str = "train", args_name: str = "args") -> str:
    """Python that launches ``function_name`` with the panel's settings.

    The code defines nothing but the call sites: ``Accelerator(...)`` belongs at the top of
    the launched function, ``notebook_launcher(...)`` in the cell.
    """
    plugin = plugin_options(values)
    deepspeed = deepspeed_options(values)
    names = ["Accelerator", *(["DeepSpeedPlugin"] if deepspeed else []), "notebook_launcher"]
    lines = [f"from nbaccel import {', '.join(names)}"]
    if plugin:
        lines.append("from nbaccel.utils import FullyShardedDataParallelPlugin")
    lines += ["", "", f"def {function_name}(*{args_name}):"]
    accel = accelerator_options(values)
    for cls, options, name in (
        ("FullyShardedDataParallelPlugin", plugin, "fsdp_plugin"),
        ("DeepSpeedPlugin", deepspeed, "deepspeed_plugin"),
    ):
        if options:
            lines.append(_call(cls, options, "    ", to=name))
            accel[name] = _Raw(name)
    lines.append(_call("Accelerator", accel, "    ", to="accelerator"))
    lines += ["    ...  # the training loop", "", ""]
    launch = launch_options(values)
    lines.append(_call("notebook_launcher", launch, "", extra=f"{function_name}, {args_name}"))
    return "\n".join(lines) + "\n"


class _Raw(str):
    """A name written as itself, not quoted."""

    def __repr__(self) -> str:
        return str(self)
