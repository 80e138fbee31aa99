"""nbaccel.data on 2 and 3 real gloo ranks: one launch per world size, a test per check."""

from __future__ import annotations

import data_checks
import pytest

from nbaccel import notebook_launcher

pytestmark = pytest.mark.multiprocess

CHECK_NAMES = [function.__name__ for function in data_checks.CHECKS]


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"{n}ranks")
def rank_results(request: pytest.FixtureRequest) -> list[dict[str, str]]:
    world = request.param
    results = notebook_launcher(data_checks.run_all_checks, num_processes=world, timeout=60)
    assert len(results) == world
    return results


@pytest.mark.parametrize("name", CHECK_NAMES)
def test_data_check(rank_results: list[dict[str, str]], name: str) -> None:
    failures = {
        rank: result.get(name, "did not run")
        for rank, result in enumerate(rank_results)
        if result.get(name) != "ok"
    }
    assert not failures, "\n".join(f"rank {r}:\n{text}" for r, text in failures.items())
