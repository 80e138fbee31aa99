"""save_state / load_state in one process: naming, limits, hooks, registration, damaged and
malicious checkpoints."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from nbaccel import Accelerator, ProjectConfiguration
from nbaccel.checkpoint.layout import checkpoint_dirs, publish


class Counter:
    def __init__(self, value: int = 0) -> None:
        self.value = value

    def state_dict(self) -> dict[str, int]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.value = state["value"]


def prepared(acc: Accelerator, seed: int) -> tuple[nn.Module, Any, Any]:
    torch.manual_seed(seed)
    model = nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    loader = DataLoader(list(range(8)), batch_size=2, shuffle=True)
    model, optimizer, loader = acc.prepare(model, optimizer, loader)
    return model, optimizer, loader


def step(model: nn.Module, optimizer: Any) -> None:
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()


def auto(tmp_path: Path, **kwargs: Any) -> Accelerator:
    config = ProjectConfiguration(
        project_dir=str(tmp_path), automatic_checkpoint_naming=True, **kwargs
    )
    return Accelerator(project_config=config)


def test_automatic_naming_total_limit_and_newest(tmp_path: Path) -> None:
    acc = auto(tmp_path, total_limit=2)
    model, optimizer, _ = prepared(acc, 0)
    saved = []
    for _ in range(3):
        step(model, optimizer)
        saved.append(model.weight.detach().clone())
        acc.save_state()
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["checkpoint_1", "checkpoint_2"]
    (root / ".checkpoint_7.staging-abc").mkdir()  # a save that was cut short
    (root / "checkpoint_9").mkdir()  # not written by save_state: no manifest
    acc2 = auto(tmp_path, total_limit=2)
    model2, _, _ = prepared(acc2, 1)
    acc2.load_state()
    assert torch.equal(model2.weight, saved[2])
    assert acc2.save_iteration == 3
    assert acc2.save_state().endswith("checkpoint_3")
    assert [i for i, _ in checkpoint_dirs(root)] == [2, 3]


def test_automatic_naming_refuses_to_overwrite(tmp_path: Path) -> None:
    acc = auto(tmp_path)
    prepared(acc, 0)
    acc.save_state()
    acc.project_configuration.iteration = 0
    with pytest.raises(ValueError, match="checkpoint_0 already exists"):
        acc.save_state()


def test_save_state_needs_a_directory(tmp_path: Path) -> None:
    acc = Accelerator()
    with pytest.raises(ValueError, match="needs output_dir"):
        acc.save_state()
    with pytest.raises(ValueError, match="needs input_dir"):
        acc.load_state()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        acc.load_state(tmp_path / "nothing")


def test_overwriting_an_explicit_directory_replaces_it_whole(tmp_path: Path) -> None:
    acc = Accelerator()
    model, optimizer, _ = prepared(acc, 0)
    target = tmp_path / "ckpt"
    acc.save_state(target)
    (target / "stray.txt").write_text("from before")
    step(model, optimizer)
    acc.save_state(target)
    assert not (target / "stray.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]
    acc2 = Accelerator()
    model2, _, _ = prepared(acc2, 5)
    acc2.load_state(target)
    assert torch.equal(model2.weight, model.weight)


def test_publish_falls_back_without_atomic_exchange(tmp_path: Path, monkeypatch: Any) -> None:
    import nbaccel.checkpoint.layout as layout

    target, staging = tmp_path / "t", tmp_path / ".t.staging-x"
    target.mkdir()
    (target / "old").write_text("old")
    staging.mkdir()
    (staging / "new").write_text("new")
    monkeypatch.setattr(layout, "_exchange", lambda a, b: False)
    publish(staging, target, "x")
    assert [p.name for p in target.iterdir()] == ["new"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]


def test_register_for_checkpointing_needs_state_dict() -> None:
    acc = Accelerator()
    with pytest.raises(ValueError, match=r"state_dict\(\) and\s+load_state_dict\(\)"):
        acc.register_for_checkpointing(Counter(), object())
    assert acc._custom_objects == []


def test_registered_objects_and_hooks(tmp_path: Path) -> None:
    acc = Accelerator()
    prepared(acc, 0)
    counter = Counter(7)
    acc.register_for_checkpointing(counter)
    calls: list[tuple[str, Any]] = []

    def on_save(models: list[nn.Module], weights: list[dict[str, Any]], out: str) -> None:
        calls.append(("save", (len(models), len(weights), Path(out).name)))
        (Path(out) / "extra.json").write_text("{}")

    handle = acc.register_save_state_pre_hook(on_save)
    acc.register_load_state_pre_hook(lambda models, d: calls.append(("load", Path(d).name)))
    path = acc.save_state(tmp_path / "ck")
    assert (Path(path) / "extra.json").exists()  # hook files land in the checkpoint
    counter.value = 0
    acc.load_state(path)
    assert counter.value == 7
    assert calls[0][0] == "save" and calls[0][1][:2] == (1, 1)
    assert calls[0][1][2].startswith(".ck.staging-")  # hooks write into the staging directory
    assert calls[1] == ("load", "ck")
    handle.remove()
    acc.save_state(tmp_path / "ck2")
    assert len([c for c in calls if c[0] == "save"]) == 1
    acc2 = Accelerator()
    prepared(acc2, 0)
    with pytest.raises(RuntimeError, match="holds 1 registered object"):
        acc2.load_state(path)


def test_load_hook_can_take_over_model_loading(tmp_path: Path) -> None:
    """A load pre-hook that loads the model its own way and removes it from the list: its
    weights are the hook's, nbaccel does not look for its file, and loads the rest."""
    acc = Accelerator()
    model, optimizer, _ = prepared(acc, 0)
    step(model, optimizer)
    path = Path(acc.save_state(tmp_path / "ck"))
    saved_weights = {k: v.clone() for k, v in acc.unwrap_model(model).state_dict().items()}
    torch.save(saved_weights, tmp_path / "own_format.pt")
    saved_moments = [s["exp_avg"].clone() for s in optimizer.state_dict()["state"].values()]
    os.remove(path / "model.safetensors")  # nbaccel reading it would fail: the file is gone
    step(model, optimizer)  # both move on from what was saved
    seen: list[tuple[list[nn.Module], str]] = []

    def load_own_way(models: list[nn.Module], directory: str) -> None:
        seen.append((list(models), directory))
        own = torch.load(tmp_path / "own_format.pt", weights_only=True)
        acc.unwrap_model(models.pop()).load_state_dict(own)

    acc.register_load_state_pre_hook(load_own_way)
    acc.load_state(path)
    assert [(len(models), d) for models, d in seen] == [(1, str(path))]
    assert seen[0][0][0] is acc._models[0]  # the prepared model, still prepared afterwards
    after = acc.unwrap_model(model).state_dict()
    assert all(torch.equal(after[k], v) for k, v in saved_weights.items())
    moments = [s["exp_avg"] for s in optimizer.state_dict()["state"].values()]
    assert len(moments) == len(saved_moments) == 2
    assert all(torch.equal(a, b) for a, b in zip(moments, saved_moments, strict=True))


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Accelerator, Path]:
    acc = Accelerator()
    model, optimizer, _ = prepared(acc, 0)
    step(model, optimizer)
    return acc, Path(acc.save_state(tmp_path / "ck"))


def test_missing_file_is_named(saved: tuple[Accelerator, Path]) -> None:
    acc, path = saved
    os.remove(path / "optimizer.safetensors")
    with pytest.raises(FileNotFoundError, match=r"optimizer\.safetensors is missing"):
        acc.load_state(path)


def test_truncated_file_is_named(saved: tuple[Accelerator, Path]) -> None:
    acc, path = saved
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"model\.safetensors is corrupt"):
        acc.load_state(path)


@pytest.mark.parametrize(
    "name", ["model.safetensors", "optimizer.safetensors", "random_states_0.pkl"]
)
def test_garbled_file_of_the_right_size_is_named(
    saved: tuple[Accelerator, Path], name: str
) -> None:
    acc, path = saved
    size = (path / name).stat().st_size
    (path / name).write_bytes(b"\x00garbage" * (size // 8) + b"\x00" * (size % 8))
    with pytest.raises(ValueError, match=rf"{name.replace('.', '[.]')} is corrupt"):
        acc.load_state(path)


class Evil:
    """Unpickling it would create the sentinel file."""

    def __init__(self, sentinel: Path) -> None:
        self.sentinel = sentinel

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.sentinel}",))


def _refresh_manifest(path: Path) -> None:
    manifest = json.loads((path / "checkpoint.json").read_text())
    manifest["files"] = {p.name: p.stat().st_size for p in path.iterdir() if p.suffix != ".json"}
    (path / "checkpoint.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("how", ["torch.save", "raw pickle"])
@pytest.mark.parametrize("name", ["optimizer.bin", "random_states_0.pkl", "dl_state_dict.bin"])
def test_crafted_pickle_never_runs(
    saved: tuple[Accelerator, Path], tmp_path: Path, name: str, how: str
) -> None:
    acc, path = saved
    sentinel = tmp_path / "pwned"
    if name == "optimizer.bin":  # the torch.save format (safe_serialization=False, or older)
        os.remove(path / "optimizer.safetensors")
    if how == "torch.save":
        torch.save({"state": Evil(sentinel)}, path / name)
    else:
        (path / name).write_bytes(pickle.dumps(Evil(sentinel), protocol=2))
    _refresh_manifest(path)  # so the size check does not stop it first
    with pytest.raises(ValueError, match=rf"Refusing to load .*{name.replace('.', '[.]')}"):
        acc.load_state(path)
    assert not sentinel.exists()


def test_manifest_lists_every_file(saved: tuple[Accelerator, Path]) -> None:
    _, path = saved
    manifest = json.loads((path / "checkpoint.json").read_text())
    assert manifest["num_processes"] == 1
    assert sorted(manifest["files"]) == sorted(
        p.name for p in path.iterdir() if p.name != "checkpoint.json"
    )


def test_pickle_weights_when_not_safe(tmp_path: Path) -> None:
    acc = Accelerator()
    model, optimizer, _ = prepared(acc, 0)
    step(model, optimizer)
    path = Path(acc.save_state(tmp_path / "ck", safe_serialization=False))
    assert (path / "pytorch_model.bin").exists() and not (path / "model.safetensors").exists()
    expected = model.weight.detach().clone()
    acc2 = Accelerator()
    model2, _, _ = prepared(acc2, 3)
    acc2.load_state(path)
    assert torch.equal(model2.weight, expected)
