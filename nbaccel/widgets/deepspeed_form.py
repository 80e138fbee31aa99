"""The config panel's DeepSpeed section without widgets: the ``DeepSpeedPlugin`` arguments the
panel's values stand for, and the problems shown next to its fields.

Each field is checked by the plugin's own validators (:mod:`nbaccel.deepspeed.checks`); the
combinations the plugin refuses (parameters offloaded below stage 3, ``nvme`` without its
folder) are named at the field to change; last, the plugin itself is built from the values.
A DeepSpeed JSON config replaces the section's other fields, as in Accelerate (the file holds
the stage and the offload): the plugin is built from the file alone, and checks it.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Protocol

from ..config.deepspeed import OFFLOAD_LOWEST_STAGE, offload_problem
from ..deepspeed.checks import OFFLOAD_DEVICES, STAGES, check_offload_device, check_stage
from ..deepspeed.plugin import DeepSpeedPlugin

__all__ = [
    "OFFLOAD_DEVICES",
    "SHARDINGS",
    "STAGES",
    "DeepSpeedValues",
    "deepspeed_problems",
    "plugin_arguments",
    "sharding_of",
]

# the panel's Sharding choice
SHARDINGS = ("none", "fsdp", "deepspeed")


class DeepSpeedValues(Protocol):
    """The fields of the panel's values that the DeepSpeed section reads."""

    device: str
    num_processes: int
    num_machines: int
    hosts: str
    mixed_precision: str
    use_fsdp: bool
    use_deepspeed: bool
    deepspeed_zero_stage: int
    deepspeed_offload_optimizer_device: str
    deepspeed_offload_optimizer_nvme_path: str
    deepspeed_offload_param_device: str
    deepspeed_offload_param_nvme_path: str
    deepspeed_config_file: str
    deepspeed_zero3_save_16bit_model: bool


def sharding_of(values: DeepSpeedValues) -> str:
    """The Sharding choice the values stand for: ``none``, ``fsdp`` or ``deepspeed``."""
    if values.use_deepspeed:
        return "deepspeed"
    return "fsdp" if values.use_fsdp else "none"


def plugin_arguments(values: DeepSpeedValues) -> dict[str, Any]:
    """``DeepSpeedPlugin`` keyword arguments (empty without DeepSpeed): the JSON config alone
    when one is given; else the stage, both offload devices and the 16-bit save (always, so
    that no launch variable fills them in) and a folder for each ``nvme`` device."""
    v = values
    if not v.use_deepspeed:
        return {}
    if v.deepspeed_config_file.strip():
        return {"hf_ds_config": v.deepspeed_config_file.strip()}
    out: dict[str, Any] = {"zero_stage": v.deepspeed_zero_stage}
    for part in OFFLOAD_LOWEST_STAGE:
        device = getattr(v, f"deepspeed_offload_{part}_device")
        out[f"offload_{part}_device"] = device
        if device == "nvme":
            out[f"offload_{part}_nvme_path"] = getattr(v, f"deepspeed_offload_{part}_nvme_path")
    out["zero3_save_16bit_model"] = v.deepspeed_zero3_save_16bit_model
    return out


def deepspeed_problems(values: DeepSpeedValues) -> dict[str, str]:
    """Every problem of the DeepSpeed section: field name -> message (empty: valid)."""
    v = values
    if not v.use_deepspeed:
        return {}
    out: dict[str, str] = {}
    if v.use_fsdp:
        out["use_deepspeed"] = "FSDP and DeepSpeed are two ways of sharding a model: choose one"
    elif v.device == "tpu":
        out["use_deepspeed"] = "DeepSpeed here runs on CPUs or GPUs; on a TPU use the XLA path"
    elif v.num_processes * v.num_machines < 2 and not v.hosts.strip():
        out["use_deepspeed"] = (
            "one process runs in the kernel itself, without DeepSpeed: use 2 or more processes"
        )
    path = v.deepspeed_config_file.strip()
    if path and not Path(path).expanduser().is_file():
        out["deepspeed_config_file"] = f"{path}: no such file (a DeepSpeed JSON config, or empty)"
    if not path:
        out.update(_field_problems(v))
    if not out:
        out.update(_plugin_problem(v))
    return out


def _field_problems(v: DeepSpeedValues) -> dict[str, str]:
    """The section's fields, by the plugin's validators and its rules for combinations."""
    out: dict[str, str] = {}
    stage: int | None = None
    try:
        stage = check_stage(v.deepspeed_zero_stage)
    except ValueError as exc:
        out["deepspeed_zero_stage"] = str(exc)
    for part in OFFLOAD_LOWEST_STAGE:
        field, name = f"deepspeed_offload_{part}_device", f"offload_{part}_device"
        try:
            device = check_offload_device(name, getattr(v, field))
        except ValueError as exc:
            out[field] = str(exc)
            continue
        folder = f"deepspeed_offload_{part}_nvme_path"
        problem = offload_problem(part, device, 3 if stage is None else stage, getattr(v, folder))
        if problem is not None:
            key, why = problem
            out[f"deepspeed_{key}"] = why
    return out


def _plugin_problem(values: DeepSpeedValues) -> dict[str, str]:
    """What ``DeepSpeedPlugin`` itself says of the values (the JSON config's contents, the
    mixed precision), at the field that holds the cause."""
    arguments = plugin_arguments(values)
    where = "deepspeed_config_file" if "hf_ds_config" in arguments else "use_deepspeed"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the plugin's notes are for the ranks, not the panel
        try:
            plugin = DeepSpeedPlugin(**arguments)
        except (ValueError, TypeError, OSError, NotImplementedError) as exc:
            return {where: str(exc)}
        try:
            plugin.set_mixed_precision(values.mixed_precision)
        except NotImplementedError as exc:  # a precision DeepSpeed does not train in
            return {"mixed_precision": str(exc)}
        except ValueError as exc:  # the JSON config enables the other 16-bit type
            return {where: str(exc)}
    return {}
