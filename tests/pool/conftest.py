"""Worker pool tests: one warm pool per module where the tests leave it intact."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "notebook"))  # kernel_helpers

from nbaccel import WorkerPool


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    """A pool of 2 CPU ranks (fork), shut down after the module's tests."""
    with WorkerPool(2, cpu=True, grace_period=3.0) as warm:
        yield warm
