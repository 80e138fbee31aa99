"""``if accelerator.is_main_process:`` around a collective: it works (merging, DDP's
save_model, printing) or fails at once on both ranks with a clear error; never a hang. One
2-rank launch under a timeout, so that a regression fails the test instead of hanging."""

from __future__ import annotations

import shutil
from typing import Any

import main_only_checks as checks
import pytest

from nbaccel import notebook_launcher

pytestmark = pytest.mark.multiprocess

WORKS = (
    "ddp_save_model",
    "main_process_first",
    "merge_on_main",
    "merge_everywhere",
)
REFUSED = (*checks.REFUSED, *checks.REFUSED_FSDP)


@pytest.fixture(scope="module")
def per_rank() -> list[dict[str, str]]:
    root = checks.shared_root()
    try:
        results: list[Any] = notebook_launcher(
            checks.run_patterns, (root,), num_processes=2, start_method="fork", timeout=150
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert len(results) == 2
    return results


@pytest.mark.parametrize("name", WORKS)
def test_pattern_works(per_rank: list[dict[str, str]], name: str) -> None:
    assert [r.get(name) for r in per_rank] == ["finished", "finished"], per_rank


@pytest.mark.parametrize("name", REFUSED)
def test_pattern_fails_at_once_on_both_ranks(per_rank: list[dict[str, str]], name: str) -> None:
    outcomes = [r.get(name, "did not run") for r in per_rank]
    assert all(o.startswith("refused: ") for o in outcomes), outcomes
    assert "process 1: wait_for_everyone" in outcomes[0], outcomes[0]
    assert "is_main_process" in outcomes[0]
