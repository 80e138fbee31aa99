"""The config panel's rows: the fields of each section, the control of each, and which rows a
set of values shows and which controls it leaves enabled."""

from __future__ import annotations

import dataclasses

import ipywidgets as widgets

from ..config.fsdp import SHARDING_STRATEGIES, STATE_DICT_TYPES, WRAP_POLICIES
from .deepspeed_form import OFFLOAD_DEVICES, STAGES
from .form import START_METHODS, PanelValues
from .hardware import Hardware

__all__ = ["CONTROLS", "DEEPSPEED_NOTE", "FIELDS", "SECTIONS", "make_control", "row_states"]

SECTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "Processes": (
        ("num_processes", "Processes"),
        ("mixed_precision", "Mixed precision"),
        ("start_method", "Start method"),
        ("gradient_accumulation_steps", "Grad. accumulation"),
        ("max_restarts", "Restarts"),
        ("display_ranks", "Rich output of ranks"),
    ),
    "Machines": (
        ("num_machines", "Machines"),
        ("machine_rank", "Machine rank"),
        ("main_process_ip", "Main address"),
        ("main_process_port", "Main port (0: free)"),
        ("hosts", "Hosts (or slurm, ray)"),
        ("hosts_python", "Python on hosts"),
        ("hosts_cwd", "Directory on hosts"),
    ),
    "Sharding": (("sharding", "Sharding"),),  # stands for use_fsdp and use_deepspeed
    "FSDP": (
        ("fsdp_version", "Version"),
        ("fsdp_sharding_strategy", "Sharding strategy"),
        ("fsdp_reshard_after_forward", "Reshard after fwd"),
        ("fsdp_auto_wrap_policy", "Wrap policy"),
        ("fsdp_transformer_layer_cls_to_wrap", "Layer classes"),
        ("fsdp_min_num_params", "Min. parameters"),
        ("fsdp_offload_params", "CPU offload"),
        ("fsdp_state_dict_type", "State dict type"),
        ("fsdp_activation_checkpointing", "Act. checkpointing"),
    ),
    "DeepSpeed": (
        ("deepspeed_zero_stage", "ZeRO stage"),
        ("deepspeed_offload_optimizer_device", "Offload optimizer"),
        ("deepspeed_offload_optimizer_nvme_path", "Optimizer NVMe dir"),
        ("deepspeed_offload_param_device", "Offload params"),
        ("deepspeed_offload_param_nvme_path", "Params NVMe dir"),
        ("deepspeed_config_file", "DeepSpeed JSON"),
        ("deepspeed_zero3_save_16bit_model", "Save 16-bit (ZeRO-3)"),
    ),
}
# every field of the panel's values (a trait of the panel each)
FIELDS = tuple(field.name for field in dataclasses.fields(PanelValues))
# one control per field, but one Sharding choice for use_fsdp and use_deepspeed
CONTROLS = ("device", *(name for rows in SECTIONS.values() for name, _ in rows))
# under the DeepSpeed section's title
DEEPSPEED_NOTE = (
    "Launch runs the function as it is: DeepSpeed applies where it builds "
    "Accelerator(deepspeed_plugin=DeepSpeedPlugin(...)) as Show code writes it."
)
_KIND_LABELS = {"cpu": "CPU", "gpu": "GPUs", "tpu": "TPU"}
_SHARDING_LABELS = (("None", "none"), ("FSDP", "fsdp"), ("DeepSpeed", "deepspeed"))
_STAGE_WORDS = {0: "no sharding", 1: "optimizer states", 2: "+ gradients", 3: "+ parameters"}


def make_control(name: str, label: str, hardware: Hardware) -> widgets.Widget:
    """The control of one row."""
    style = {"description_width": "150px"}
    if name == "device":
        options = [(_KIND_LABELS[k], k) for k in hardware.kinds]
        return widgets.ToggleButtons(options=options, description="Hardware", style=style)
    if name == "sharding":
        return widgets.ToggleButtons(options=list(_SHARDING_LABELS), description=label, style=style)
    kind = {f.name: f.type for f in dataclasses.fields(PanelValues)}[name]
    choices = {
        "mixed_precision": hardware.precisions("cpu"),
        "start_method": START_METHODS,
        "fsdp_version": (1, 2),
        "fsdp_sharding_strategy": SHARDING_STRATEGIES,
        "fsdp_auto_wrap_policy": WRAP_POLICIES,
        "fsdp_state_dict_type": STATE_DICT_TYPES,
        "deepspeed_zero_stage": [(f"{s}: {_STAGE_WORDS.get(s, '')}", s) for s in STAGES],
        "deepspeed_offload_optimizer_device": OFFLOAD_DEVICES,
        "deepspeed_offload_param_device": OFFLOAD_DEVICES,
    }
    if name in choices:
        return widgets.Dropdown(options=list(choices[name]), description=label, style=style)
    if kind == "bool":
        return widgets.Checkbox(description=label, indent=True, style=style)
    if kind == "int":
        return widgets.IntText(description=label, style=style, layout={"width": "280px"})
    return widgets.Text(description=label, style=style, layout={"width": "420px"})


def row_states(values: PanelValues) -> dict[str, tuple[bool, bool]]:
    """For each row of the FSDP and DeepSpeed sections: (shown, enabled).

    A section's rows show with its Sharding choice, each where it applies; below ZeRO stage 3
    the stage-3 fields are greyed out, unless they hold a value other than their default (its
    message says why, and the control stays there to undo it); a DeepSpeed JSON config greys
    out every other DeepSpeed field (the file holds them).
    """
    v = values
    fsdp = {
        "fsdp_sharding_strategy": v.fsdp_version == 1,
        "fsdp_reshard_after_forward": v.fsdp_version == 2,
        "fsdp_transformer_layer_cls_to_wrap": v.fsdp_auto_wrap_policy == "TRANSFORMER_BASED_WRAP",
        "fsdp_min_num_params": v.fsdp_auto_wrap_policy == "SIZE_BASED_WRAP",
        "fsdp_offload_params": v.device == "gpu" or v.fsdp_offload_params,
    }
    out = {name: (v.use_fsdp and fsdp.get(name, True), True) for name, _ in SECTIONS["FSDP"]}
    stage3 = v.deepspeed_zero_stage == 3
    param_offload = v.deepspeed_offload_param_device != "none"
    deepspeed = {
        "deepspeed_offload_optimizer_nvme_path": v.deepspeed_offload_optimizer_device == "nvme",
        "deepspeed_offload_param_nvme_path": v.deepspeed_offload_param_device == "nvme",
    }
    enabled = {
        "deepspeed_offload_param_device": stage3 or param_offload,
        "deepspeed_offload_param_nvme_path": stage3 or param_offload,
        "deepspeed_zero3_save_16bit_model": stage3 or v.deepspeed_zero3_save_16bit_model,
    }
    from_file = bool(v.deepspeed_config_file.strip())
    for name, _ in SECTIONS["DeepSpeed"]:
        usable = name == "deepspeed_config_file" or (not from_file and enabled.get(name, True))
        out[name] = (v.use_deepspeed and deepspeed.get(name, True), usable)
    return out
