"""The DeepSpeed settings a launcher hands its processes, under Accelerate's variable names.

``accelerate launch --use_deepspeed`` and ``nbaccel launch --use_deepspeed`` set
``ACCELERATE_USE_DEEPSPEED=true`` and one ``ACCELERATE_DEEPSPEED_*`` variable per setting;
``DeepSpeedPlugin()`` reads them for the fields it was not given (:func:`read_deepspeed_launch`),
and ``Accelerator()`` builds a plugin by itself when the launch asked for DeepSpeed
(:func:`deepspeed_launched`). :func:`deepspeed_launch_variables` writes them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._vars import _bool_var, _environ
from .launch import read_launch_environment

__all__ = [
    "choose_deepspeed_accelerator",
    "deepspeed_launch_variables",
    "deepspeed_launched",
    "deepspeed_ops_folder",
    "deepspeed_shm_buffer",
    "read_deepspeed_launch",
]

_USE = "ACCELERATE_USE_DEEPSPEED"

# the plugin's field -> Accelerate's variable
DEEPSPEED_VARIABLES = {
    "hf_ds_config": "ACCELERATE_DEEPSPEED_CONFIG_FILE",
    "zero_stage": "ACCELERATE_DEEPSPEED_ZERO_STAGE",
    "offload_optimizer_device": "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE",
    "offload_param_device": "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE",
    "offload_optimizer_nvme_path": "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH",
    "offload_param_nvme_path": "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH",
    "zero3_init_flag": "ACCELERATE_DEEPSPEED_ZERO3_INIT",
    "zero3_save_16bit_model": "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL",
    "transformer_moe_cls_names": "ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES",
    "gradient_accumulation_steps": "ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
    "gradient_clipping": "ACCELERATE_GRADIENT_CLIPPING",
}


def deepspeed_launched(environ: Mapping[str, str] | None = None) -> bool:
    """True when the launcher asked for DeepSpeed (``ACCELERATE_USE_DEEPSPEED=true``)."""
    return _bool_var(_environ(environ), _USE)


def read_deepspeed_launch(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The plugin fields the launch set, as raw text (``"none"`` and empty values left out);
    ``DeepSpeedPlugin`` validates them."""
    env = _environ(environ)
    found: dict[str, str] = {}
    for field, name in DEEPSPEED_VARIABLES.items():
        raw = env.get(name)
        if raw is not None and raw.strip() not in ("", "none", "None"):
            found[field] = raw.strip()
    return found


def deepspeed_launch_variables(settings: Mapping[str, Any]) -> dict[str, str]:
    """The variables a launcher sets so that ``Accelerator()`` in its processes runs
    DeepSpeed with ``settings`` (plugin field -> value; None values are left out)."""
    variables = {_USE: "true"}
    for field, value in settings.items():
        if field not in DEEPSPEED_VARIABLES:
            raise ValueError(
                f"{field!r} is not a DeepSpeed launch setting; known: "
                f"{', '.join(sorted(DEEPSPEED_VARIABLES))}."
            )
        if value is None:
            continue
        text = str(value).lower() if isinstance(value, bool) else str(value)
        variables[DEEPSPEED_VARIABLES[field]] = text
    return variables


def choose_deepspeed_accelerator(device_type: str) -> None:
    """Tell DeepSpeed (before its import) that this process trains on the CPU, unless the user
    chose already (``DS_ACCELERATOR``): it then neither guesses nor warns, and a process asked
    to run on the CPU on a GPU machine (``cpu=True``) keeps DeepSpeed there too.

    On the CPU, DeepSpeed counts its devices from ``LOCAL_SIZE`` (its own launcher sets it),
    else by running ``numactl --hardware``, which ZeRO-3 does at every step: the launch's
    processes on this machine are set as ``LOCAL_SIZE`` when the user has not set it."""
    if device_type == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        local_size = read_launch_environment().local_world_size
        os.environ.setdefault("LOCAL_SIZE", str(max(local_size, 1)))


def deepspeed_ops_folder(environ: Mapping[str, str] | None = None) -> str:
    """Where torch keeps this interpreter's compiled extensions, DeepSpeed's ops among them:
    ``TORCH_EXTENSIONS_DIR``, else torch's default under the home, in the folder torch names
    after the Python version and the torch build (``py311_cpu``)."""
    # torch's extension tools: imported only by the callers that look for DeepSpeed's ops
    import torch
    from torch.utils.cpp_extension import get_default_build_root

    root = _environ(environ).get("TORCH_EXTENSIONS_DIR") or get_default_build_root()
    build = f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda else "cpu"
    python = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
    return str(Path(root) / f"{python}_{build}")


SHM_FOLDER = "/dev/shm"


def deepspeed_shm_buffer(rank: int, environ: Mapping[str, str] | None = None) -> Path | None:
    """The shared-memory buffer DeepSpeed's CPU communication op makes for ``rank`` of the
    launch whose variables are ``environ`` (this process's by default), when every rank is on
    one machine
    (``LOCAL_SIZE`` = the world size, which :func:`choose_deepspeed_accelerator` sets):
    ``deepspeed_allreduce_buffer_<uid>_<MASTER_ADDR>_<MASTER_PORT>_<rank>`` in /dev/shm,
    66 MB each, which DeepSpeed (0.19) never removes. None without an address and a port."""
    env = _environ(environ)
    address, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
    if not address or not port:
        return None
    name = f"deepspeed_allreduce_buffer_{os.getuid()}_{address}_{port}_{rank}"
    return Path(SHM_FOLDER) / name
