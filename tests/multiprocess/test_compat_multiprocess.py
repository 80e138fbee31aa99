"""Accelerate's cross-process names on 2 real gloo ranks (one launch, one test per check):
set_trigger / check_trigger, synchronize_rng_states, join_uneven_inputs,
trigger_sync_in_backward, ParallelismConfig meshes, copy_tensor_to_devices, save, profile,
DDP communication hooks."""

from __future__ import annotations

import compat_checks
import pytest

from nbaccel import notebook_launcher

pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def per_rank() -> list[dict[str, str]]:
    results = notebook_launcher(
        compat_checks.run_compat_checks, num_processes=2, start_method="fork", timeout=180
    )
    assert len(results) == 2
    return results


@pytest.mark.parametrize("name", [f.__name__ for f in compat_checks.COMPAT_CHECKS])
def test_check(per_rank: list[dict[str, str]], name: str) -> None:
    failures = [
        f"{name} failed on rank {rank}:\n{result.get(name, 'did not run')}"
        for rank, result in enumerate(per_rank)
        if result.get(name) != "ok"
    ]
    assert not failures, "\n\n".join(failures)
