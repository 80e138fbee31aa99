"""Large results arrive intact, unpicklable results are explained, events reach on_event."""

from __future__ import annotations

import os
import time
from typing import Any

import launcher_helpers as h
import numpy as np
import pytest
import torch

from nbaccel import WorkerError
from nbaccel.launch.events import (
    MetricsEvent,
    ProgressEvent,
    RankStateEvent,
    emit,
    report_metrics,
    report_progress,
)

pytestmark = pytest.mark.multiprocess


@pytest.mark.timeout(120)
def test_launcher_returns_200mb_tensor_and_array_from_each_rank_intact() -> None:
    before = h.child_pids()
    results = h.launch(h.big_payload)
    assert [r["rank"] for r in results] == [0, 1]
    for rank, result in enumerate(results):
        tensor, array = result["tensor"], result["array"]
        assert isinstance(tensor, torch.Tensor)
        assert tensor.dtype == torch.float32
        assert tensor.shape == (h.BIG_ELEMENTS,)
        assert isinstance(array, np.ndarray)
        assert array.dtype == np.float32
        assert array.shape == (h.BIG_ELEMENTS,)
        # the checksums the worker computed match the data that arrived
        assert float(tensor.sum(dtype=torch.float64)) == result["tensor_sum"]
        assert float(array.sum(dtype=np.float64)) == result["array_sum"]
        # and it is, element for element, what this rank made
        assert torch.equal(tensor, h.big_tensor(rank))
        assert np.array_equal(array, h.big_array(100 + rank))
    assert results[0]["tensor_sum"] != results[1]["tensor_sum"]
    assert not h.wait_no_children(before)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("function", "type_words"),
    [(h.return_generator, ("generator",)), (h.return_lock, ("lock",))],
    ids=["generator", "lock"],
)
def test_launcher_unpicklable_result_names_rank_and_type(
    function: Any, type_words: tuple[str, ...]
) -> None:
    before = h.child_pids()
    with pytest.raises(Exception) as info:
        h.launch(function)
    exc = info.value
    worker_error = exc if isinstance(exc, WorkerError) else exc.__cause__
    assert isinstance(worker_error, WorkerError), f"no WorkerError behind {exc!r}"
    message = str(exc)
    assert f"rank {worker_error.rank}" in message
    assert worker_error.rank in (0, 1)
    for word in type_words:
        assert word in message, message
    assert "pickle" in message
    h.assert_clean_then_next_launch_works(before)


@pytest.mark.timeout(60)
def test_launcher_delivers_worker_events_to_on_event_in_the_parent() -> None:
    received: list[tuple[int, Any]] = []
    results = h.launch(h.send_events, on_event=lambda e: received.append((os.getpid(), e)))
    assert results == [True, True], "report_progress/report_metrics/emit returned False"
    assert all(pid == os.getpid() for pid, _ in received), "on_event not called in the parent"
    events = [e for _, e in received]
    for rank in (0, 1):
        mine = [e for e in events if e.rank == rank]
        # one pipe per rank: this rank's events keep their order
        kinds = [RankStateEvent, ProgressEvent, MetricsEvent, h.CustomEvent, RankStateEvent]
        assert [type(e) for e in mine] == kinds, mine
        state, progress, metrics, custom, finished = mine
        assert state.state == "running"
        assert finished.state == "returned"  # sent by the launcher when the result arrived
        assert state.restart_count == 0
        assert (progress.n, progress.total, progress.desc) == (1, 10, "train")
        assert metrics.values == {"loss": 0.25 * (rank + 1)}
        assert metrics.step == 3
        assert custom.note == f"hello from {rank}"
        assert abs(custom.time - time.time()) < 60


def test_launcher_event_helpers_do_nothing_outside_a_worker() -> None:
    assert report_progress(1, 2) is False
    assert report_metrics({"loss": 1.0}) is False
    assert emit(RankStateEvent(rank=0)) is False


@pytest.mark.timeout(60)
def test_launcher_events_from_spawned_workers_reach_on_event() -> None:
    received: list[Any] = []
    assert h.launch(h.send_events, start_method="spawn", on_event=received.append) == [True] * 2
    running = sorted(
        e.rank for e in received if isinstance(e, RankStateEvent) and e.state == "running"
    )
    assert running == [0, 1]
    assert sorted(e.rank for e in received if isinstance(e, h.CustomEvent)) == [0, 1]
