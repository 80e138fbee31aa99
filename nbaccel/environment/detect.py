"""Where this process runs: a Jupyter kernel, Colab, Kaggle, a TPU host."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from ._vars import _bool_var, _environ


def in_notebook() -> bool:
    """True inside a Jupyter (IPython kernel) session."""
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    get = getattr(shell, "get_ipython", None)
    ip = get() if get else None
    return ip is not None and "IPKernelApp" in getattr(ip, "config", {})


def in_colab(environ: Mapping[str, str] | None = None) -> bool:
    """True on Google Colab."""
    env = _environ(environ)
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in env or "COLAB_GPU" in env


def in_kaggle(environ: Mapping[str, str] | None = None) -> bool:
    """True in a Kaggle kernel."""
    return "KAGGLE_KERNEL_RUN_TYPE" in _environ(environ)


def tpu_requested(environ: Mapping[str, str] | None = None) -> bool:
    """True when the environment says a TPU is attached (Colab, Kaggle, Cloud TPU VMs)."""
    env = _environ(environ)
    if env.get("PJRT_DEVICE", "").upper() == "TPU":
        return True
    return any(env.get(name) for name in ("TPU_NAME", "COLAB_TPU_ADDR", "TPU_ACCELERATOR_TYPE"))


def xla_requested(environ: Mapping[str, str] | None = None) -> bool:
    """True when the environment asks for torch_xla's device: a TPU (see :func:`tpu_requested`)
    or ``PJRT_DEVICE`` set to any device (``CPU`` runs the XLA path on torch_xla's CPU device,
    off TPU). ``USE_TORCH_XLA=0`` (Accelerate's switch) turns the XLA path off in any case."""
    env = _environ(environ)
    if not _bool_var_default_true(env, "USE_TORCH_XLA"):
        return False
    return tpu_requested(env) or bool(env.get("PJRT_DEVICE", "").strip())


def _bool_var_default_true(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name)
    return True if raw is None or not raw.strip() else _bool_var(env, name)


def xla_available(environ: Mapping[str, str] | None = None) -> bool:
    """True when the XLA path is requested (:func:`xla_requested`) and ``torch_xla`` imports.
    Never imports it otherwise."""
    if not xla_requested(environ):
        return False
    if importlib.util.find_spec("torch_xla") is None:
        return False
    try:
        # torch_xla is installed on TPU hosts only
        import torch_xla  # noqa: F401
    except Exception:  # a broken install must not break detection
        return False
    return True


def xla_device_name(environ: Mapping[str, str] | None = None) -> str:
    """What the XLA path runs on, for messages: ``PJRT_DEVICE``'s value, else ``TPU``."""
    return _environ(environ).get("PJRT_DEVICE", "").strip().upper() or "TPU"


def xla_bf16_storage_requested(environ: Mapping[str, str] | None = None) -> bool:
    """True when ``XLA_USE_BF16`` or ``XLA_DOWNCAST_BF16`` asks torch_xla to keep float32
    tensors in bfloat16 (how Accelerate runs bf16 on a TPU); autocast is then not needed."""
    env = _environ(environ)
    return _bool_var(env, "XLA_USE_BF16") or _bool_var(env, "XLA_DOWNCAST_BF16")


@dataclass(frozen=True)
class XlaTopology:
    """Ranks as the XLA runtime reports them (TPU processes are not launched through env)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int


def xla_topology() -> XlaTopology:
    """Ask ``torch_xla`` for this process's ordinals. Only call when :func:`xla_available`."""
    # torch_xla is installed on TPU hosts only
    import torch_xla.runtime as xr

    return XlaTopology(
        rank=int(xr.global_ordinal()),
        world_size=int(xr.world_size()),
        local_rank=int(xr.local_ordinal()),
        local_world_size=int(getattr(xr, "local_process_count", lambda: xr.world_size())()),
    )
