"""How much memory a process holds (resident, and on the GPUs through NVML): the one reader
the dashboard, the pool's status and a host's agent share."""

from __future__ import annotations

from collections.abc import Iterable

import psutil

from .devices import cuda_device_count

__all__ = ["gpu_memory", "process_rss"]


def process_rss(pid: int | None) -> int | None:
    """Resident memory of ``pid`` in bytes, or None when there is no such process or it has
    ended (a zombie not yet reaped reads 0 bytes, which is no figure)."""
    if pid is None:
        return None
    try:
        rss = int(psutil.Process(pid).memory_info().rss)
    except (psutil.Error, OSError):
        return None
    return rss or None


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
