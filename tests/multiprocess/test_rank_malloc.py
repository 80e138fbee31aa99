"""A launched rank keeps the memory it frees for reuse (``launch/worker/allocator.py``): a large
block comes from the heap, where a freed one is reused, rather than from a mapping of its own
that glibc gives back to the system at once; ``NBACCEL_MALLOC_TUNING=0`` leaves glibc's malloc
as it is. (The faults this saves a training step: ``python -m benchmarks deepspeed``.)"""

from __future__ import annotations

import os

import psutil
import pytest
import torch

from nbaccel import notebook_launcher

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.skipif(
        not os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"), reason="glibc's malloc only"
    ),
]

BUFFER = 40 << 20  # above the largest threshold glibc picks by itself (32 MiB)


def _block_in_heap() -> bool:
    """Whether a 40 MiB tensor made in this rank lies in the process's heap."""
    block = torch.empty(BUFFER, dtype=torch.uint8)
    address = block.data_ptr()
    with open("/proc/self/maps", encoding="ascii") as maps:
        for line in maps:
            span, *rest = line.split()
            low, high = (int(x, 16) for x in span.split("-"))
            if low <= address < high:
                return rest[-1] == "[heap]"
    return False


def test_a_rank_takes_large_blocks_from_the_heap_and_the_variable_turns_it_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert not _block_in_heap()  # this process (the notebook's side) is left as it is
    assert notebook_launcher(_block_in_heap, num_processes=2) == [True, True]
    assert notebook_launcher(_block_in_heap, num_processes=2, start_method="spawn") == [True] * 2

    monkeypatch.setenv("NBACCEL_MALLOC_TUNING", "0")
    assert notebook_launcher(_block_in_heap, num_processes=2) == [False, False]


def test_a_bad_value_of_the_variable_fails_before_any_rank_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NBACCEL_MALLOC_TUNING", "sometimes")
    with pytest.raises(ValueError, match="NBACCEL_MALLOC_TUNING='sometimes'"):
        notebook_launcher(_block_in_heap, num_processes=2)
    assert psutil.Process().children(recursive=True) == []
