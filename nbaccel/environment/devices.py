"""Counting devices and choosing device and backend, without initialising CUDA."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from ._vars import _environ
from .detect import xla_available
from .launch import LaunchEnvironment

_VISIBLE_SPLIT = re.compile(r"\s*,\s*")


def _visible_filter(count: int, environ: Mapping[str, str]) -> int:
    raw = environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return count
    ids = [item for item in _VISIBLE_SPLIT.split(raw.strip()) if item]
    visible = 0
    for item in ids:
        if not item.isdigit() or int(item) >= count:
            break  # the CUDA runtime stops at the first invalid entry
        visible += 1
    return visible


def cuda_device_count(environ: Mapping[str, str] | None = None) -> int:
    """Number of usable CUDA devices, counted without initialising CUDA in this process.

    Uses NVML (fork-safe) and falls back to the driver's ``/dev/nvidiaN`` files; the CUDA
    runtime is asked only when CUDA is already initialised in this process.
    """
    if not torch.backends.cuda.is_built():
        return 0
    if torch.cuda.is_initialized():
        return torch.cuda.device_count()
    counter = getattr(torch.cuda, "_device_count_nvml", None)
    if counter is not None:
        try:
            count = int(counter())
        except Exception:
            count = -1
        if count >= 0:
            return count
    dev = Path("/dev")
    physical = sum(1 for p in dev.glob("nvidia*") if p.name[len("nvidia") :].isdigit())
    return _visible_filter(physical, _environ(environ))


def hardware_description(gpus: bool) -> str:
    """A short description of the CPU or the NVIDIA GPUs, read without initialising CUDA."""
    if gpus:
        names = []
        for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
            for line in info.read_text(errors="replace").splitlines():
                if line.startswith("Model:"):
                    names.append(line.split(":", 1)[1].strip())
        count = cuda_device_count()
        model = f" ({names[0]})" if names else ""
        return f"{count} CUDA GPU{'s' if count != 1 else ''}{model}"
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip() + ", "
                break
    cores = os.cpu_count() or 1
    return f"CPU ({model}{cores} core{'s' if cores != 1 else ''})"


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


@dataclass(frozen=True)
class DeviceChoice:
    """The device a process trains on and the process-group backend it uses."""

    device: torch.device
    backend: str | None
    kind: str  # "cpu", "cuda", "mps" or "xla"


def choose_device(launch: LaunchEnvironment, cpu: bool = False) -> DeviceChoice:
    """Pick device and backend for this process without initialising CUDA.

    Args:
        launch: how the process was launched.
        cpu: force the CPU even when an accelerator is present (a device named in
            ``launch.torch_device`` is used even then, as Accelerate does).
    """
    force_cpu = cpu or launch.use_cpu
    distributed_backend = "gloo" if launch.distributed else None
    if launch.torch_device is not None:  # asked for by name: used as it is, as in Accelerate
        named = torch.device(launch.torch_device)
        if named.type == "xla":
            return DeviceChoice(named, "xla", "xla")
        if named.type == "cuda" and launch.distributed:
            return DeviceChoice(named, "nccl", "cuda")
        return DeviceChoice(named, distributed_backend, named.type)
    if force_cpu:
        return DeviceChoice(torch.device("cpu"), distributed_backend, "cpu")
    if xla_available():
        # torch_xla is installed on TPU hosts only
        import torch_xla

        device = getattr(torch_xla, "device", None)  # torch_xla 2.5+; xla_device before
        if device is None:
            # torch_xla is installed on TPU hosts only
            import torch_xla.core.xla_model as xm

            device = xm.xla_device
        return DeviceChoice(torch.device(device()), "xla", "xla")
    count = cuda_device_count()
    if count > 0:
        index = launch.local_rank % count if launch.distributed else 0
        backend = "nccl" if launch.distributed else None
        return DeviceChoice(torch.device("cuda", index), backend, "cuda")
    if not launch.distributed and _mps_available():
        return DeviceChoice(torch.device("mps"), None, "mps")
    return DeviceChoice(torch.device("cpu"), distributed_backend, "cpu")


# --- config files and the sanity test's switch -------------------------------------------------
