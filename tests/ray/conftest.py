"""The Ray tier's bed (a Ray head on a login machine and two worker nodes, each in a network
namespace): built once per session, removed at the end, and checked to have left nothing
behind."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ray.bed_ray import BIN, BedError, RayBed
from tests.support.beds import namespaces_refused

HERE = Path(__file__).resolve().parent
INSTALL_RAY = 'pip install -e ".[ray]"'


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "ray: a real Ray cluster of a head and two nodes in namespaces (needs root)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:  # every test of this folder, whoever writes it
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.ray)


def _unavailable() -> str | None:
    """Why this machine cannot build the bed at all (a skip), or None."""
    # the state API (ray.util.state) needs the dashboard, which needs ray[default]'s aiohttp
    missing = [name for name in ("ray", "aiohttp") if importlib.util.find_spec(name) is None]
    if missing or not (BIN / "ray").exists():
        return (
            f"the Ray bed needs Ray with its dashboard ({', '.join(missing) or 'the `ray` CLI'} "
            f"missing here): {INSTALL_RAY}"
        )
    return namespaces_refused(
        "the Ray bed", ".venv/bin/python -m pytest tests/ray -m ray", "nbr-probe"
    )


@pytest.fixture(scope="session")
def ray_ready() -> None:
    """Skip where no bed can be built."""
    reason = _unavailable()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def ray_bed(ray_ready: None) -> Iterator[RayBed]:
    """The bed, shared by the session's tests; gone (checked) after it."""
    bed = RayBed()
    try:
        bed.start()
    except BedError as exc:
        pytest.fail(f"the Ray bed did not start: {exc}", pytrace=False)
    try:
        yield bed
    finally:
        bed.close()
    left = bed.leftovers()
    assert not left, f"the Ray bed left these behind: {left}"
