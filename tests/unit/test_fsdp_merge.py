"""merge_fsdp_weights and ``nbaccel merge-weights`` in one process, on DCP directories written
here with torch.distributed.checkpoint (no process group): merging, errors, and refusing
directories that would run code when loaded."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file
from torch import nn

from nbaccel.cli.main import build_parser, main
from nbaccel.utils import merge_fsdp_weights


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))


def write_dcp(directory: Path, state: dict[str, Any]) -> Path:
    with pytest.warns(UserWarning, match="single process"):
        dcp.save(state, checkpoint_id=directory, no_dist=True)
    return directory


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    return write_dcp(
        tmp_path / "ckpt" / "pytorch_model_fsdp_0", {"model": make_model().state_dict()}
    )


@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "bin"])
def test_merged_model_loads_into_the_plain_model(
    model_dir: Path, tmp_path: Path, safe: bool
) -> None:
    merge_fsdp_weights(model_dir, tmp_path / "out", safe_serialization=safe)
    path = tmp_path / "out" / ("model.safetensors" if safe else "pytorch_model.bin")
    assert sorted(os.listdir(tmp_path / "out")) == [path.name]
    state = load_file(path) if safe else torch.load(path, weights_only=True)
    fresh = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
    fresh.load_state_dict(state, strict=True)
    for key, value in make_model().state_dict().items():
        assert torch.equal(fresh.state_dict()[key], value), key
    assert model_dir.is_dir()


def test_merged_optimizer_keeps_state_and_param_groups(tmp_path: Path) -> None:
    state = {
        "state": {
            "0.weight": {"exp_avg": torch.randn(6, 4), "step": torch.tensor(3.0)},
            "2.bias": {"exp_avg": torch.randn(2), "step": torch.tensor(3.0)},
        },
        "param_groups": [
            {"lr": 0.1, "betas": (0.9, 0.99), "foreach": None, "params": ["0.weight"]},
            {"lr": 0.0, "betas": (0.8, 0.9), "foreach": False, "params": ["2.bias"]},
        ],
    }
    source = write_dcp(tmp_path / "optimizer_0", {"optimizer": state})
    merge_fsdp_weights(source, tmp_path / "out")  # safetensors cannot hold it: optimizer.bin
    merged = torch.load(tmp_path / "out" / "optimizer.bin", weights_only=True)
    assert merged["param_groups"] == state["param_groups"]
    for name, entry in state["state"].items():
        for key, value in entry.items():
            assert torch.equal(merged["state"][name][key], value), (name, key)


def test_remove_checkpoint_dir(model_dir: Path, tmp_path: Path) -> None:
    merge_fsdp_weights(model_dir, tmp_path / "out", remove_checkpoint_dir=True)
    assert not model_dir.exists()
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_a_whole_checkpoint_directory_names_its_sharded_directories(
    model_dir: Path, tmp_path: Path
) -> None:
    whole = model_dir.parent
    write_dcp(whole / "optimizer_0", {"optimizer": {"state": {}, "param_groups": []}})
    with pytest.raises(ValueError) as caught:
        merge_fsdp_weights(whole, tmp_path / "out")
    message = str(caught.value)
    for words in (
        str(whole),
        "no .metadata",
        "SHARDED_STATE_DICT",
        "optimizer_0, pytorch_model_fsdp_0",
    ):
        assert words in message, message
    assert not (tmp_path / "out").exists()


def test_a_full_checkpoint_needs_no_merge(tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="already in one file"):
        merge_fsdp_weights(tmp_path / "full", tmp_path / "out")


def test_missing_directory_and_bad_output(model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere does not exist"):
        merge_fsdp_weights(tmp_path / "nowhere", tmp_path / "out")
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="is a file"):
        merge_fsdp_weights(model_dir, tmp_path / "file")
    with pytest.raises(ValueError, match="inside"):
        merge_fsdp_weights(model_dir, model_dir / "merged", remove_checkpoint_dir=True)
    assert model_dir.is_dir()
    with pytest.raises(
        TypeError, match=r"merge_fsdp_weights\(safe_serialization\) must be True or False"
    ):
        merge_fsdp_weights(model_dir, tmp_path / "out", safe_serialization="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="checkpoint_dir"):
        merge_fsdp_weights(None, tmp_path / "out")  # type: ignore[arg-type]


class Payload:
    """Unpickling this creates ``self.marker``: it must never happen."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (open, (str(self.marker), "w"))


def test_crafted_metadata_is_refused_without_running(model_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (model_dir / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(ValueError, match=r"Refusing to read .*\.metadata.*io\.open"):
        merge_fsdp_weights(model_dir, tmp_path / "out")
    assert not marker.exists()


def test_crafted_entry_is_refused_without_running(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    state = {"model": {"weight": torch.ones(2), "extra": Payload(marker)}}
    source = write_dcp(tmp_path / "evil", state)
    with pytest.raises(ValueError, match=r"Refusing to load the entry 'model\.extra'"):
        merge_fsdp_weights(source, tmp_path / "out")
    assert not marker.exists()


def test_the_command_is_registered_and_reports_errors(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "merge-weights" in build_parser().format_help()
    assert main(["merge-weights", str(model_dir.parent), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nbaccel merge-weights: ") and str(model_dir.parent) in err, err
    assert "pytorch_model_fsdp_0" in err, err
    assert main(["merge-weights", str(model_dir), str(tmp_path / "out")]) == 0
    assert str(tmp_path / "out" / "model.safetensors") in capsys.readouterr().out
