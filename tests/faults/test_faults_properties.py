"""Point 6 (properties): split_between_processes, pad_across_processes and
gather_for_metrics over random lengths, shapes, padding options and batch sizes, at 1, 2 and
3 processes. One launch (one process group) per world size runs every property inside the
ranks (property_checks.py); hypothesis is derandomized and bounded to
``property_checks.EXAMPLES`` examples per property."""

from __future__ import annotations

import pytest

pytest.importorskip("hypothesis")

import property_checks

from nbaccel import notebook_launcher

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]


@pytest.mark.parametrize("world", [1, 2, 3])
def test_collective_helpers_hold_their_properties(world: int) -> None:
    """Promise: split shares cover the input once, in rank order (evenly padded when asked);
    padding keeps every rank's data and fills with pad_index (in front with pad_first);
    gather_for_metrics over a prepared loader returns exactly the data set, in order."""
    results = notebook_launcher(
        property_checks.run_all, num_processes=world, start_method="fork", timeout=100
    )
    assert results == [property_checks.EXAMPLES] * world
