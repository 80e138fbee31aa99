"""Checkpointing on real ranks: round trips at 1 and 2 processes, exact resume across
launches, and a save killed with SIGKILL while a pre-save hook holds it."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from nbaccel import WorkerError, notebook_launcher
from tests.support import checkpoints as helpers

pytestmark = pytest.mark.multiprocess


@pytest.mark.parametrize("world", [1, 2], ids=lambda n: f"{n}ranks")
def test_round_trips(tmp_path: Path, world: int) -> None:
    results = notebook_launcher(
        helpers.all_round_trips, (str(tmp_path),), num_processes=world, timeout=120
    )
    assert len(results) == world
    failures = {
        f"rank {rank} {name}": text
        for rank, result in enumerate(results)
        for name, text in result.items()
        if text != "ok"
    }
    assert not failures, "\n".join(f"{k}:\n{v}" for k, v in failures.items())
    assert sorted(p.name for p in (tmp_path / "plain").iterdir()) == sorted(
        [
            "checkpoint.json",
            "custom_checkpoint_0.pkl",
            "dl_state_dict.bin",
            "model.safetensors",
            "optimizer.safetensors",
            "scheduler.bin",
            *[f"random_states_{r}.pkl" for r in range(world)],
        ]
    )


@pytest.mark.parametrize("stateful", [False, True], ids=["skip_first_batches", "stateful"])
def test_exact_resume_is_bitwise_equal(tmp_path: Path, stateful: bool) -> None:
    directory = str(tmp_path / "ckpt")
    launch = lambda mode: notebook_launcher(  # noqa: E731
        helpers.exact_resume, (mode, directory, stateful), num_processes=2, timeout=120
    )
    full = launch("full")
    assert launch("first") == [None, None]
    resumed = launch("resume")
    for rank in range(2):
        assert full[rank].keys() == resumed[rank].keys()
        for key, value in full[rank].items():
            assert torch.equal(value, resumed[rank][key]), (rank, key)
    assert torch.equal(full[0]["0.weight"], full[1]["0.weight"])  # DDP kept ranks in step


def _kill_when_held(hold_dir: Path, killed: list[int]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pids = [hold_dir / f"{rank}.pid" for rank in range(2)]
        if all(p.exists() and p.read_text() for p in pids):
            for p in pids:
                pid = int(p.read_text())
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            return
        time.sleep(0.02)


def test_save_killed_mid_way_leaves_previous_checkpoint(tmp_path: Path) -> None:
    project = str(tmp_path / "project")
    saved = notebook_launcher(helpers.save_numbered, (project,), num_processes=2, timeout=60)
    hold_dir = tmp_path / "hold"
    hold_dir.mkdir()
    killed: list[int] = []
    killer = threading.Thread(target=_kill_when_held, args=(hold_dir, killed), daemon=True)
    killer.start()
    with pytest.raises(WorkerError, match="SIGKILL"):
        notebook_launcher(helpers.held_save, (project, str(hold_dir)), num_processes=2, timeout=90)
    killer.join(timeout=5)
    assert len(killed) == 2, "both ranks were held inside save_state and killed"
    entries = sorted(p.name for p in (tmp_path / "project" / "checkpoints").iterdir())
    assert entries[-1] == "checkpoint_0" and len(entries) == 2, entries
    assert entries[0].startswith(".checkpoint_1.staging-"), entries  # the half checkpoint
    loaded = notebook_launcher(helpers.load_newest, (project,), num_processes=2, timeout=60)
    for rank in range(2):
        weights, next_number = loaded[rank]
        assert next_number == 1
        assert all(torch.equal(weights[k], saved[rank][k]) for k in saved[rank])
    notebook_launcher(helpers.save_numbered, (project,), num_processes=2, timeout=60)
    entries = sorted(p.name for p in (tmp_path / "project" / "checkpoints").iterdir())
    assert entries == ["checkpoint_0", "checkpoint_1"], entries  # the stale staging is gone
