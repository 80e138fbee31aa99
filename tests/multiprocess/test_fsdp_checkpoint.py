"""FSDP checkpoints on 2 and 4 real gloo ranks: sharded save, a restart that loads and
continues, full round trips, merged weights against the single-process reference, and the
``nbaccel merge-weights`` command. Two launches per world size share one directory."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_helpers import detail, nbaccel
from safetensors.torch import load_file

from nbaccel import notebook_launcher
from nbaccel.utils import merge_fsdp_weights
from tests.support import fsdp_checkpoints as checks
from tests.support.fsdp import Net

pytestmark = pytest.mark.multiprocess

WORLD_SIZES = (2, 4)


@dataclasses.dataclass
class Runs:
    root: Path
    saved: list[dict[str, Any]]  # save_phase, per rank (tensors on rank 0)
    resumed: list[dict[str, Any]]  # resume_phase: a second launch, as after a restart


def _launch_both(root: Path, world: int) -> Runs:
    launch = lambda fn: notebook_launcher(  # noqa: E731
        fn, (str(root),), num_processes=world, start_method="fork", timeout=150
    )
    saved = launch(checks.save_phase)
    resumed = launch(checks.resume_phase)
    assert len(saved) == len(resumed) == world
    return Runs(root, saved, resumed)


@pytest.fixture(scope="module")
def runs2(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return _launch_both(tmp_path_factory.mktemp("fsdp_ckpt_2"), 2)


@pytest.fixture(scope="module")
def runs4(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return _launch_both(tmp_path_factory.mktemp("fsdp_ckpt_4"), 4)


@pytest.fixture(params=WORLD_SIZES, ids=lambda n: f"{n}ranks")
def runs(request: pytest.FixtureRequest) -> Runs:
    """The two launches at 2 and at 4 processes (each made once for the module)."""
    return request.getfixturevalue(f"runs{request.param}")


@pytest.mark.parametrize("name", checks.CHECK_NAMES)
def test_check(runs: Runs, name: str) -> None:
    failures = [
        f"{name} failed on rank {rank}:\n{outcome.get(name, 'did not run')}"
        for rank, (first, second) in enumerate(zip(runs.saved, runs.resumed, strict=True))
        for outcome in [{**first["checks"], **second["checks"]}]
        if outcome.get(name) != "ok"
    ]
    assert not failures, "\n\n".join(failures)


def _equal(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert set(got) == set(want), sorted(set(got) ^ set(want))
    for key, value in want.items():
        assert torch.equal(got[key], value), (
            f"{key}: max difference {(got[key] - value).abs().max()}"
        )


@pytest.mark.parametrize("version", checks.VERSIONS, ids=lambda v: f"fsdp{v}")
def test_restart_load_continue_equals_uninterrupted(runs: Runs, version: int) -> None:
    """Saved at step 2 of 4 with SHARDED_STATE_DICT; a new launch loads and trains steps 3-4:
    bitwise the weights of the run that went on without stopping."""
    first, second = runs.saved[0], runs.resumed[0]
    _equal(second[f"loaded_v{version}"], first[f"saved_v{version}"])
    _equal(second[f"final_v{version}"], first[f"final_v{version}"])


@pytest.mark.parametrize("version", checks.VERSIONS, ids=lambda v: f"fsdp{v}")
def test_sharded_checkpoint_loads_into_the_other_version(runs: Runs, version: int) -> None:
    _equal(runs.resumed[0][f"cross_v{version}"], runs.saved[0][f"saved_v{version}"])


def test_sharded_checkpoint_loads_at_another_world_size(runs4: Runs) -> None:
    """Saved by 4 processes, loaded by 2: the same weights and optimizer state."""
    loaded = notebook_launcher(
        checks.load_at_another_world_size,
        (str(runs4.root),),
        num_processes=2,
        start_method="fork",
        timeout=150,
    )
    for version in checks.VERSIONS:
        _equal(loaded[0][f"loaded_v{version}"], runs4.saved[0][f"saved_v{version}"])
        checks.same(
            loaded[0][f"loaded_optim_v{version}"],
            runs4.saved[0][f"saved_optim_v{version}"],
            f"optimizer v{version}",
        )


@pytest.mark.parametrize("version", checks.VERSIONS, ids=lambda v: f"fsdp{v}")
def test_merged_weights_equal_the_single_process_reference(
    runs: Runs, version: int, tmp_path: Path
) -> None:
    source = runs.root / f"sharded_v{version}" / "pytorch_model_fsdp_0"
    merge_fsdp_weights(source, tmp_path / "merged")
    assert sorted(p.name for p in (tmp_path / "merged").iterdir()) == ["model.safetensors"]
    plain = Net()
    plain.load_state_dict(load_file(tmp_path / "merged" / "model.safetensors"), strict=True)
    merged = plain.state_dict()
    _equal(merged, runs.saved[0][f"saved_v{version}"])  # what the sharded run held
    for key, value in checks.reference(checks.SAVE_AT, len(runs.saved)).items():
        assert torch.allclose(merged[key], value, atol=1e-5), key
    assert source.is_dir()  # remove_checkpoint_dir=False keeps it


@pytest.mark.parametrize("version", checks.VERSIONS, ids=lambda v: f"fsdp{v}")
def test_merged_optimizer_is_the_full_optimizer_state(
    runs: Runs, version: int, tmp_path: Path
) -> None:
    merge_fsdp_weights(runs.root / f"sharded_v{version}" / "optimizer_0", tmp_path)
    merged = torch.load(tmp_path / "optimizer.bin", weights_only=True)
    checks.same(merged, runs.saved[0][f"saved_optim_v{version}"], "optimizer")


def test_merge_weights_command(runs2: Runs, tmp_path: Path) -> None:
    """The console command in a child process, with both switches (its errors are checked
    in-process in tests/unit/test_fsdp_merge.py)."""
    copy = tmp_path / "copy"
    shutil.copytree(runs2.root / "sharded_v2" / "pytorch_model_fsdp_0", copy)
    out = tmp_path / "out"
    done = nbaccel(
        "merge-weights",
        str(copy),
        str(out),
        "--unsafe_serialization",
        "--remove_checkpoint_dir",
        home=tmp_path,
    )
    assert done.returncode == 0, detail(done)
    assert str(out / "pytorch_model.bin") in done.stdout, detail(done)
    assert not copy.exists()
    plain = Net()
    state = torch.load(out / "pytorch_model.bin", weights_only=True)
    plain.load_state_dict(state, strict=True)
    _equal(plain.state_dict(), runs2.saved[0]["saved_v2"])
