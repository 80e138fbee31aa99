"""DeepSpeed through the Accelerator on 2 real gloo ranks with the real ``deepspeed``: one
forked launch runs every check of deepspeed_checks and deepspeed_api_checks (one test each);
a spawned launch runs one ZeRO-3 training check again."""

from __future__ import annotations

import os
from pathlib import Path

import deepspeed_api_checks  # noqa: F401  (registers its checks with deepspeed_checks)
import deepspeed_checks
import pytest
import torch

from nbaccel import notebook_launcher

pytestmark = pytest.mark.multiprocess

NAMES = [f.__name__ for f in deepspeed_checks.CHECKS]


@pytest.fixture(scope="module")
def per_rank(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, str]]:
    root = tmp_path_factory.mktemp("deepspeed")
    results = notebook_launcher(
        deepspeed_checks.run_all_checks,
        args=(str(root),),
        num_processes=2,
        start_method="fork",
        timeout=400,
    )
    assert len(results) == 2
    return results


def _failures(per_rank: list[dict[str, str]], name: str) -> list[str]:
    return [
        f"{name} failed on rank {rank}:\n{outcome.get(name, 'did not run')}"
        for rank, outcome in enumerate(per_rank)
        if outcome.get(name) != "ok"
    ]


@pytest.mark.parametrize("name", NAMES)
def test_check(per_rank: list[dict[str, str]], name: str) -> None:
    failures = _failures(per_rank, name)
    assert not failures, "\n\n".join(failures)


def test_a_spawned_launch_trains_zero3_like_one_process(tmp_path: Path) -> None:
    results = notebook_launcher(
        deepspeed_checks.run_all_checks,
        args=(str(tmp_path), ["zero3_equals_one_process"]),
        num_processes=2,
        start_method="spawn",
        timeout=300,
    )
    failures = _failures(results, "zero3_equals_one_process")
    assert not failures, "\n\n".join(failures)


def _build_an_engine() -> str:
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from nbaccel import Accelerator
    from nbaccel.utils import DeepSpeedPlugin

    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
    model = nn.Linear(4, 1)
    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
    engine, _, _ = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), loader)
    return type(engine).__name__


def _engine_and_its_buffer(fail_on: int = -1) -> bool:
    """Build a ZeRO-2 engine; whether DeepSpeed made this rank's shared-memory buffer (rank
    ``fail_on`` raises then)."""
    import os

    from nbaccel.environment import deepspeed_shm_buffer

    _build_an_engine()
    rank = int(os.environ["RANK"])
    buffer = deepspeed_shm_buffer(rank)
    if rank == fail_on:
        raise ValueError(f"rank {rank} fails with its buffer at {buffer}")
    return buffer is not None and buffer.exists()


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm")
def test_deepspeeds_shared_memory_buffers_are_removed_when_the_ranks_end() -> None:
    """DeepSpeed's CPU communication op makes a 66 MB buffer in /dev/shm per rank and never
    removes it; the launcher removes them once the ranks have ended, or have been stopped
    after one failed."""
    pattern = f"deepspeed_allreduce_buffer_{os.getuid()}_*"
    before = set(Path("/dev/shm").glob(pattern))
    assert notebook_launcher(_engine_and_its_buffer, num_processes=2) == [True, True]
    assert set(Path("/dev/shm").glob(pattern)) <= before
    with pytest.raises(ValueError, match="rank 1 fails with its buffer at /dev/shm/deepspeed_"):
        notebook_launcher(_engine_and_its_buffer, (1,), num_processes=2)
    assert set(Path("/dev/shm").glob(pattern)) <= before


def test_without_a_compiler_the_error_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine whose C++ compiler is missing (CXX points nowhere; no op built yet): the
    failing rank's error says what to install, in the notebook's cell."""
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ops"))
    with pytest.raises(RuntimeError, match="could not build its C\\+\\+ ops") as raised:
        notebook_launcher(_build_an_engine, num_processes=2, start_method="fork", timeout=200)
    message = str(raised.value)
    assert "Install a C++ compiler" in message and str(tmp_path / "ops") in message, message
