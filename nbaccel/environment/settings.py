"""Variables that point at files and switches: the config file, the sanity test switch."""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping
from pathlib import Path

from ._vars import _bool_var, _environ, _int_var
from .allocator import MALLOC_TUNING_VARIABLE

CONFIG_FILE_VARIABLE = "NBACCEL_CONFIG_FILE"  # nbaccel launch sets it for its processes


def set_config_file_override(path: str) -> None:
    """Name ``path`` as the config file in force for this process and its children (what a
    rank of ``nbaccel launch --hosts`` does with the resolved config it was sent)."""
    os.environ[CONFIG_FILE_VARIABLE] = path


def config_file_override(environ: Mapping[str, str] | None = None) -> str | None:
    """The config file named by ``NBACCEL_CONFIG_FILE`` (also set by ``nbaccel launch`` for
    its processes, to the resolved config), or None."""
    raw = _environ(environ).get(CONFIG_FILE_VARIABLE, "").strip()
    return raw or None


def _home(env: Mapping[str, str]) -> Path:
    home = env.get("HOME", "").strip()
    return Path(home) if home else Path.home()


def nbaccel_default_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """``~/.cache/nbaccel/default_config.yaml`` (``~`` is ``$HOME``)."""
    return _home(_environ(environ)) / ".cache" / "nbaccel" / "default_config.yaml"


def accelerate_config_candidates(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Where Accelerate keeps its default config: ``$HF_HOME/accelerate/default_config.yaml``
    (``HF_HOME`` defaults to ``$XDG_CACHE_HOME/huggingface``, then ``~/.cache/huggingface``),
    then the older ``default_config.json`` beside it."""
    env = _environ(environ)
    hf_home = env.get("HF_HOME", "").strip()
    if hf_home:
        base = Path(hf_home).expanduser()
    else:
        xdg = env.get("XDG_CACHE_HOME", "").strip()
        base = (Path(xdg).expanduser() if xdg else _home(env) / ".cache") / "huggingface"
    folder = base / "accelerate"
    return [folder / "default_config.yaml", folder / "default_config.json"]


def sanity_fail_rank(environ: Mapping[str, str] | None = None) -> int | None:
    """The rank that ``nbaccel test``'s sanity script fails on purpose
    (``NBACCEL_TEST_FAIL_RANK``), or None."""
    return _int_var(_environ(environ), "NBACCEL_TEST_FAIL_RANK", default=None)


def ssh_server_address(environ: Mapping[str, str] | None = None) -> str | None:
    """The address this machine was reached at by the ssh session this process runs in (the
    third field of ``SSH_CONNECTION``, which sshd sets), or None outside one."""
    fields = _environ(environ).get("SSH_CONNECTION", "").split()
    return fields[2] if len(fields) >= 4 else None


def gloo_socket_interface(environ: Mapping[str, str] | None = None) -> str | None:
    """The network interface the user pinned gloo to (``GLOO_SOCKET_IFNAME``), or None."""
    return _environ(environ).get("GLOO_SOCKET_IFNAME") or None


_RAM_EFFICIENT_LOADING = "FSDP_CPU_RAM_EFFICIENT_LOADING"


def fsdp_ram_efficient_loading_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether RAM-efficient loading for FSDP is switched on (``FSDP_CPU_RAM_EFFICIENT_LOADING``,
    the variable that Accelerate and Transformers read)."""
    return _bool_var(_environ(environ), _RAM_EFFICIENT_LOADING)


def set_fsdp_ram_efficient_loading(enabled: bool) -> None:
    """Write the documented toggle ``FSDP_CPU_RAM_EFFICIENT_LOADING`` (``True`` / ``False``);
    enabling it also sets ``ACCELERATE_USE_FSDP`` when unset, so that Transformers'
    ``is_fsdp_enabled()`` is true and ``from_pretrained`` loads RAM-efficiently, as with
    Accelerate."""
    os.environ[_RAM_EFFICIENT_LOADING] = "True" if enabled else "False"
    if enabled:
        os.environ.setdefault("ACCELERATE_USE_FSDP", "True")


def environment_for_child(exclude: re.Pattern[str]) -> dict[str, str]:
    """This process's variables, without those whose names match ``exclude`` (for starting a
    separate program, e.g. a second kernel, that must not inherit launch variables)."""
    return {key: value for key, value in os.environ.items() if not exclude.match(key)}


def slurm_allocation(environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """``(job id, node list)`` of the SLURM allocation this process runs in (``SLURM_JOB_ID``
    and ``SLURM_JOB_NODELIST``, older SLURM's ``SLURM_NODELIST``; the list in SLURM's compressed
    form, such as ``node[1-2]``), or None outside one."""
    env = _environ(environ)
    job = env.get("SLURM_JOB_ID", "").strip()
    nodes = (env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "").strip()
    return (job, nodes) if job and nodes else None


def ray_address(environ: Mapping[str, str] | None = None) -> str | None:
    """The Ray cluster that ``ray.init()`` joins when given no address (``RAY_ADDRESS``, as Ray
    reads it: ``host:port`` of its GCS, ``auto``, or a ``ray://`` client address), or None."""
    return _environ(environ).get("RAY_ADDRESS", "").strip() or None


# The kernel's variables that every rank on another machine (``hosts=``) gets as well: torch's
# and NCCL's switches, the Hugging Face and tracker settings and tokens. Paths (PATH,
# LD_LIBRARY_PATH, HF_HOME...) stay each host's own; ``env=`` adds or replaces any variable.
COPIED_TO_HOSTS = (
    "NCCL_*",
    "TORCH_*",
    "TORCHINDUCTOR_*",
    "TORCHDYNAMO_*",
    "PYTORCH_*",
    "CUDA_LAUNCH_BLOCKING",
    "HF_TOKEN",
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "TOKENIZERS_PARALLELISM",
    "WANDB_*",
    "MLFLOW_*",
    "COMET_*",
    "PYTHONHASHSEED",
    MALLOC_TUNING_VARIABLE,
)


def variables_for_hosts(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's variables that :data:`COPIED_TO_HOSTS` names."""
    return {
        name: value
        for name, value in _environ(environ).items()
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in COPIED_TO_HOSTS)
    }
