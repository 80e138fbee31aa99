"""Worker pool tests: one warm pool per module where the tests leave it intact."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nbaccel import WorkerPool


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    """A pool of 2 CPU ranks (fork), shut down after the module's tests."""
    with WorkerPool(2, cpu=True, grace_period=3.0) as warm:
        yield warm
