"""nbaccel.ops on 2 and 3 real gloo ranks: one launch per world size, one test per check."""

from __future__ import annotations

import ops_checks
import pytest

from nbaccel import notebook_launcher

pytestmark = pytest.mark.multiprocess

WORLD_SIZES = (2, 3)
CHECK_NAMES = [function.__name__ for function in ops_checks.CHECKS]


@pytest.fixture(scope="module", params=WORLD_SIZES, ids=lambda n: f"{n}ranks")
def per_rank(request: pytest.FixtureRequest) -> list[dict[str, str]]:
    """Every rank's ``{check: "ok" or traceback}`` from one launch of ``request.param`` ranks."""
    results = notebook_launcher(
        ops_checks.run_all_checks,
        num_processes=request.param,
        start_method="fork",
        timeout=120,
    )
    assert len(results) == request.param
    return results


@pytest.mark.parametrize("name", CHECK_NAMES)
def test_check(per_rank: list[dict[str, str]], name: str) -> None:
    failures = [
        f"{name} failed on rank {rank}/{len(per_rank)}:\n{outcome.get(name, 'did not run')}"
        for rank, outcome in enumerate(per_rank)
        if outcome.get(name) != "ok"
    ]
    assert not failures, "\n\n".join(failures)
