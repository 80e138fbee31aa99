"""Whether a rank keeps the memory it frees for reuse (glibc's malloc thresholds fixed), as
read from its environment: the one place that knows the variables involved."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ._vars import _bool_var, _environ

__all__ = [
    "MALLOC_TUNING_VARIABLE",
    "MMAP_THRESHOLD",
    "TRIM_THRESHOLD",
    "MallocChoice",
    "malloc_variables",
    "read_malloc_choice",
]

MALLOC_TUNING_VARIABLE = "NBACCEL_MALLOC_TUNING"  # "0": leave every rank's malloc as it is
# blocks below it come from the heap, and are reused there: glibc's own largest automatic
# threshold, so that no block is kept in the heap that glibc could not have put there itself
# (larger ones, e.g. a 64 MiB layer being loaded, stay mappings of their own, given back at once)
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 512 << 20  # free memory at the heap's top kept, up to this much

# glibc's own variables for the same settings: a user who set one has chosen already
_GLIBC_VARIABLES = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
)
_GLIBC_TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold")
_OTHER_ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc")


@dataclass(frozen=True)
class MallocChoice:
    """What a rank does with its allocator.

    Attributes:
        tune: fix glibc's thresholds, so that freed memory is reused rather than given back
            to the system and faulted in again at the next step.
        reason: why not, when ``tune`` is False (for the documentation's "why is it off").
    """

    tune: bool
    reason: str = ""


def read_malloc_choice(environ: Mapping[str, str] | None = None) -> MallocChoice:
    """Tune unless ``NBACCEL_MALLOC_TUNING`` says no, the user set glibc's own malloc
    variables or tunables, or ``LD_PRELOAD`` brings another allocator."""
    env = _environ(environ)
    if MALLOC_TUNING_VARIABLE in env and not _bool_var(env, MALLOC_TUNING_VARIABLE):
        return MallocChoice(False, f"{MALLOC_TUNING_VARIABLE}={env[MALLOC_TUNING_VARIABLE]}")
    for name in _GLIBC_VARIABLES:
        if name in env:
            return MallocChoice(False, f"{name} is set")
    tunables = env.get("GLIBC_TUNABLES", "")
    if any(name in tunables for name in _GLIBC_TUNABLES):
        return MallocChoice(False, "GLIBC_TUNABLES sets malloc's thresholds")
    preload = env.get("LD_PRELOAD", "").lower()
    for allocator in _OTHER_ALLOCATORS:
        if allocator in preload:
            return MallocChoice(False, f"LD_PRELOAD loads {allocator}")
    return MallocChoice(True)


def malloc_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """glibc's own variables for the same thresholds, for a process that starts afresh
    (``nbaccel launch``'s, which read them as they start); empty when
    :func:`read_malloc_choice` says to leave malloc alone."""
    if not read_malloc_choice(environ).tune:
        return {}
    return {
        "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD),
        "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD),
    }
