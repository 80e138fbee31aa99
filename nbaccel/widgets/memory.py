"""Per-process GPU memory for the dashboard, through NVML (RSS: ``environment.process_rss``)."""

from __future__ import annotations

from collections.abc import Iterable

from ..environment import cuda_device_count

__all__ = ["format_bytes", "gpu_memory"]


def gpu_memory(pids: Iterable[int]) -> dict[int, int]:
    """GPU memory used by each of ``pids`` (bytes), read through NVML; empty without a GPU.

    NVML is the driver's library: reading it does not initialise CUDA in this process.
    """
    wanted = set(pids)
    if not wanted or cuda_device_count() == 0:
        return {}
    try:
        import pynvml  # nvidia-ml-py, which torch uses to count devices
    except ImportError:
        return {}
    out: dict[int, int] = {}
    try:
        pynvml.nvmlInit()
        try:
            for index in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if proc.pid in wanted and proc.usedGpuMemory:
                        out[proc.pid] = out.get(proc.pid, 0) + int(proc.usedGpuMemory)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, or an NVML error: the dashboard shows no GPU column
        return {}
    return out


def format_bytes(size: int | None) -> str:
    """``"1.2 GiB"``-style text, ``"-"`` for None."""
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"  # pragma: no cover
