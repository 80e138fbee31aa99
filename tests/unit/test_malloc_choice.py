"""Who decides a rank's malloc: nbaccel's variable, then the user's own glibc settings or
another allocator (``environment/allocator.py``); the thresholds themselves in this process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nbaccel.environment import read_malloc_choice


@pytest.mark.parametrize(
    ("env", "tune", "reason"),
    [
        ({}, True, ""),
        ({"NBACCEL_MALLOC_TUNING": "1"}, True, ""),
        ({"NBACCEL_MALLOC_TUNING": "off"}, False, "NBACCEL_MALLOC_TUNING=off"),
        ({"MALLOC_TRIM_THRESHOLD_": "0"}, False, "MALLOC_TRIM_THRESHOLD_ is set"),
        ({"MALLOC_MMAP_THRESHOLD_": "65536"}, False, "MALLOC_MMAP_THRESHOLD_ is set"),
        ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1"}, False, "GLIBC_TUNABLES"),
        ({"GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=512"}, True, ""),
        ({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}, False, "jemalloc"),
        ({"LD_PRELOAD": "libtcmalloc_minimal.so.4"}, False, "tcmalloc"),
    ],
)
def test_the_choice_follows_the_users_own_settings(
    env: dict[str, str], tune: bool, reason: str
) -> None:
    choice = read_malloc_choice(env)
    assert choice.tune is tune
    assert reason in choice.reason


def test_a_value_that_is_not_yes_or_no_is_refused_with_the_values_to_use() -> None:
    with pytest.raises(ValueError, match=r"NBACCEL_MALLOC_TUNING='maybe'.*'off'"):
        read_malloc_choice({"NBACCEL_MALLOC_TUNING": "maybe"})


@pytest.mark.skipif(
    not os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"), reason="glibc's malloc only"
)
def test_fixed_thresholds_keep_a_freed_block_in_the_heap_until_given_back() -> None:
    """In a fresh interpreter: a 24 MiB block lies outside the heap (glibc maps it alone)
    before, in the heap after the thresholds are fixed; freeing it keeps the heap's memory
    until ``give_back_freed_memory`` trims it."""
    script = """
import ctypes, psutil
from nbaccel.environment import MallocChoice
from nbaccel.launch.worker.allocator import keep_freed_memory, give_back_freed_memory
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
def in_heap(address):
    for line in open("/proc/self/maps"):
        span, *rest = line.split()
        low, high = (int(x, 16) for x in span.split("-"))
        if low <= address < high:
            return rest[-1] == "[heap]"
    return False
def rss():
    return psutil.Process().memory_info().rss >> 20
block = libc.malloc(24 << 20); print(in_heap(block)); libc.free(ctypes.c_void_p(block))
print(keep_freed_memory(MallocChoice(False)), keep_freed_memory(MallocChoice(True)))
block = libc.malloc(24 << 20); print(in_heap(block))
ctypes.memset(block, 1, 24 << 20); libc.free(ctypes.c_void_p(block))
kept = rss(); give_back_freed_memory(); print(kept - rss() > 16)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["False", "False", "True", "True", "True"], done.stderr
