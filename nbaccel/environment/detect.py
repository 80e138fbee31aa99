"""Where this process runs: a Jupyter kernel, Colab, Kaggle, a TPU host."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from ._vars import _environ


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


def xla_available(environ: Mapping[str, str] | None = None) -> bool:
    """True when a TPU is requested and ``torch_xla`` imports. Never imports it otherwise."""
    if not tpu_requested(environ):
        return False
    if importlib.util.find_spec("torch_xla") is None:
        return False
    try:
        import torch_xla  # noqa: F401
    except Exception:  # a broken install must not break detection
        return False
    return True


@dataclass(frozen=True)
class XlaTopology:
    """Ranks as the XLA runtime reports them (TPU processes are not launched through env)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int


def xla_topology() -> XlaTopology:
    """Ask ``torch_xla`` for this process's ordinals. Only call when :func:`xla_available`."""
    import torch_xla.runtime as xr

    return XlaTopology(
        rank=int(xr.global_ordinal()),
        world_size=int(xr.world_size()),
        local_rank=int(xr.local_ordinal()),
        local_world_size=int(getattr(xr, "local_process_count", lambda: xr.world_size())()),
    )
