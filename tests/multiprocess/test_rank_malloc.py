"""A launched rank keeps the memory it frees for reuse (``launch/worker/allocator.py``): its
blocks below 32 MiB come from the heap, where a freed one stays for the next step, rather than
from mappings of their own that glibc may give back at once; ``NBACCEL_MALLOC_TUNING=0`` leaves
glibc's malloc as it is, and the notebook's own process is never touched. (The page faults this
saves a ZeRO-3 step, about 11,000 to about 200: ``python -m benchmarks deepspeed``.)"""

from __future__ import annotations

import os

import psutil
import pytest
import torch

from nbaccel import notebook_launcher
from nbaccel.launch.worker.allocator import tuned

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.skipif(
        not os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"), reason="glibc's malloc only"
    ),
]


def _in_heap(address: int) -> bool:
    with open("/proc/self/maps", encoding="ascii") as maps:
        for line in maps:
            span, *rest = line.split()
            low, high = (int(x, 16) for x in span.split("-"))
            if low <= address < high:
                return rest[-1] == "[heap]"
    return False


def _malloc_report() -> tuple[bool, bool, bool]:
    """Whether this rank's thresholds are fixed; whether a 24 MiB tensor lies in the heap
    (glibc's default maps a block that size alone until the process has freed one); and
    whether a 48 MiB one does (above the fixed threshold: never)."""
    mid = torch.empty(24 << 20, dtype=torch.uint8)
    big = torch.empty(48 << 20, dtype=torch.uint8)
    return tuned(), _in_heap(mid.data_ptr()), _in_heap(big.data_ptr())


def test_a_rank_takes_its_blocks_from_the_heap_and_the_variable_turns_it_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for method in ("fork", "spawn"):
        reports = notebook_launcher(_malloc_report, num_processes=2, start_method=method)
        assert reports == [(True, True, False)] * 2, (method, reports)
    assert not tuned()  # the notebook's own process is left as it is

    monkeypatch.setenv("NBACCEL_MALLOC_TUNING", "0")
    reports = notebook_launcher(_malloc_report, num_processes=2)
    assert [on for on, _, _ in reports] == [False, False], reports


def test_a_bad_value_of_the_variable_fails_before_any_rank_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NBACCEL_MALLOC_TUNING", "sometimes")
    with pytest.raises(ValueError, match="NBACCEL_MALLOC_TUNING='sometimes'"):
        notebook_launcher(_malloc_report, num_processes=2)
    assert psutil.Process().children(recursive=True) == []
