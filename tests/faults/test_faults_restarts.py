"""Point 3: restarts. With ``max_restarts=2`` and a checkpoint per epoch, a rank that fails
once (in epoch 1 of 3) makes the launcher relaunch the group; the function reads
``PartialState().restart_count``, resumes from the newest checkpoint, and ends with weights
bitwise equal to an uninterrupted run's."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import fault_helpers as fh
import pytest
import torch

from nbaccel import notebook_launcher

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(90)]


@pytest.mark.parametrize("fault", ["raise", "sigkill"])
def test_one_failure_resumes_from_the_checkpoint_to_identical_weights(
    fault: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], record: Callable[..., None]
) -> None:
    """Promise: one failed attempt, one restart, the same final weights (torch.equal)."""
    before = fh.Leftovers.take()
    uninterrupted = notebook_launcher(fh.train, num_processes=2, start_method="fork")
    capsys.readouterr()
    started = time.monotonic()
    resumed = notebook_launcher(
        fh.train,
        kwargs={"fault": fault, "fault_step": 6, "project_dir": str(tmp_path / "project")},
        num_processes=2,
        start_method="fork",
        max_restarts=2,
    )
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert err.count("restarting the group") == 1, err[-2000:]
    assert "1/2 restarts used" in err
    for rank in range(2):
        for key, value in uninterrupted[rank].items():
            assert torch.equal(value, resumed[rank][key]), (rank, key)
    root = tmp_path / "project" / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == [
        "checkpoint_0",
        "checkpoint_1",
        "checkpoint_2",
    ]
    assert fh.incomplete_checkpoints(root) == []
    assert not fh.wait_clean(before)
    record(seconds=round(elapsed, 2))
