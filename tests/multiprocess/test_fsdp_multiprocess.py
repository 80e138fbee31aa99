"""FSDP on 2 and 4 real gloo ranks: one launch per world size, one test per check."""

from __future__ import annotations

import fsdp_checks
import pytest

from nbaccel import notebook_launcher

pytestmark = pytest.mark.multiprocess

WORLD_SIZES = (2, 4)
CHECK_NAMES = [f.__name__ for f in fsdp_checks.CHECKS if f.__name__ != "sharding_table"]
TABLE = [f"table:v{v}:{s}" for v in (1, 2) for s in fsdp_checks.STRATEGIES]


@pytest.fixture(scope="module", params=WORLD_SIZES, ids=lambda n: f"{n}ranks")
def per_rank(request: pytest.FixtureRequest) -> list[dict[str, str]]:
    """Every rank's ``{check: "ok" or traceback}`` from one launch of ``request.param`` ranks."""
    results = notebook_launcher(
        fsdp_checks.run_all_checks, num_processes=request.param, start_method="fork", timeout=150
    )
    assert len(results) == request.param
    return results


def _failures(per_rank: list[dict[str, str]], name: str) -> list[str]:
    return [
        f"{name} failed on rank {rank}/{len(per_rank)}:\n{outcome.get(name, 'did not run')}"
        for rank, outcome in enumerate(per_rank)
        if outcome.get(name) != "ok"
    ]


@pytest.mark.parametrize("name", CHECK_NAMES)
def test_check(per_rank: list[dict[str, str]], name: str) -> None:
    failures = _failures(per_rank, name)
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("entry", TABLE)
def test_sharding_table(per_rank: list[dict[str, str]], entry: str) -> None:
    """Every (version x strategy) trains to the single-process reference's weights."""
    failures = _failures(per_rank, entry)
    assert not failures, "\n\n".join(failures)
