"""A rank's malloc: memory it frees is kept for reuse while it trains, and given back to the
system between a pool's tasks.

glibc gives large freed blocks back to the system at once (``munmap``, or trimming the top of
its heap) and adjusts its thresholds as the process goes. A training step that allocates and
frees the same large buffers every time (ZeRO-3 gathers each layer's whole parameters and
frees them; activations, gradients) then pays the kernel to map and zero that memory again at
every step: thousands of page faults a step. A rank fixes the two thresholds once, at its
start, so that such blocks come from the heap and stay there; torch's own CPU launcher gets
the same effect by preloading another allocator. A pool's rank, which stays alive between
cells, gives its free memory back after each task (``malloc_trim``).

Only glibc's malloc is touched, and only when :func:`~nbaccel.environment.read_malloc_choice`
says so (``NBACCEL_MALLOC_TUNING=0``, glibc's own ``MALLOC_*`` variables or an allocator in
``LD_PRELOAD`` leave it alone).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from ...environment import MMAP_THRESHOLD, TRIM_THRESHOLD, MallocChoice

__all__ = ["give_back_freed_memory", "keep_freed_memory", "tuned"]

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
_TUNED: list[Any] = []  # the C library, once this process's thresholds are fixed


def _glibc() -> Any:
    """The process's C library when it is glibc (whose ``mallopt`` this module knows)."""
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):  # not a GNU system
        return None
    if not version.startswith("glibc"):
        return None
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def keep_freed_memory(choice: MallocChoice) -> bool:
    """Fix glibc's thresholds in this process (a rank, at its start) when ``choice`` says
    so. Returns whether they were fixed."""
    if not choice.tune or _TUNED:
        return bool(_TUNED)
    libc = _glibc()
    if libc is None:
        return False
    if libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1:
        return False
    if libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1:
        return False
    _TUNED.append(libc)
    return True


def give_back_freed_memory() -> None:
    """Give the heap's free memory back to the system (a pool's rank, after each task);
    nothing when this process's thresholds were not fixed."""
    if _TUNED:
        _TUNED[0].malloc_trim(0)


def tuned() -> bool:
    """Whether this process's thresholds were fixed (by :func:`keep_freed_memory`)."""
    return bool(_TUNED)
