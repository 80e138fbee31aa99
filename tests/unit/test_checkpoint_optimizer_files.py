"""Optimizer states as safetensors (optimizer.safetensors), the parallel tensor file writer and
reader, and checkpoints in the earlier optimizer.bin format."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from torch import nn

from nbaccel import Accelerator
from nbaccel.checkpoint import transfer
from nbaccel.checkpoint.files import load_tensors_into, save_tensors
from nbaccel.checkpoint.optimizer_files import (
    STATE_KEY,
    encode_state,
    load_optimizer_state,
    optimizer_file,
)
from nbaccel.checkpoint.tensorfile import tensor_files_written


def _write_optimizer(state: dict[str, Any], path: Path) -> None:
    prepared = optimizer_file(state, path)
    assert prepared is not None
    with tensor_files_written([prepared]):
        pass


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return type(b) is torch.Tensor and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_every_plain_value_comes_back_with_its_type(tmp_path: Path) -> None:
    shared = torch.arange(6, dtype=torch.float32)
    state = {
        "state": {
            0: {"step": torch.tensor(3.0), "buf": torch.randn(4, 3), "half": torch.ones(2).half()},
            7: {"bf": torch.randn(5).bfloat16(), "empty": torch.zeros(0, 4), "n": 12},
            2: {"a": shared, "b": shared, "flags": torch.tensor([True, False])},
        },
        "param_groups": [
            {
                "lr": torch.tensor(0.01),
                "betas": (0.9, 0.999),
                "eps": 1e-8,
                "foreach": None,
                "maximize": False,
                "name": "body",
                "limits": [math.inf, -math.inf, math.nan],
                "nested": {1: (2, [3.5, {"x": None}]), "k": ()},
                "params": [0, 7, 2],
            }
        ],
    }
    path = tmp_path / "optimizer.safetensors"
    _write_optimizer(state, path)
    loaded = load_optimizer_state(path, {})
    assert _same(state, loaded)
    assert loaded["state"][2]["a"] is loaded["state"][2]["b"]  # stored once, still shared
    with safe_open(os.fspath(path), framework="pt") as handle:  # readable by safetensors alone
        assert torch.equal(handle.get_tensor("state.0.buf"), state["state"][0]["buf"])
        assert STATE_KEY in (handle.metadata() or {})


@pytest.mark.parametrize(
    "value",
    [torch.float32, torch.zeros(2).to_sparse(), torch.zeros(2, requires_grad=True), object()],
    ids=["dtype", "sparse", "requires_grad", "object"],
)
def test_values_the_format_cannot_hold_are_left_to_torch_save(value: Any) -> None:
    assert encode_state({"state": {}, "param_groups": [{"params": [], "x": value}]}) is None


def _setup(seed: int, layers: int = 2) -> tuple[Accelerator, nn.Module, Any]:
    acc = Accelerator()
    torch.manual_seed(seed)
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(layers)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, betas=(0.8, 0.9))
    model, optimizer = acc.prepare(model, optimizer)
    return acc, model, optimizer


def _train(model: nn.Module, optimizer: Any) -> None:
    for _ in range(2):
        model(torch.randn(5, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()


def _copy(optimizer: Any) -> dict[int, dict[str, torch.Tensor]]:
    state = optimizer.state_dict()["state"]
    return {k: {n: t.clone() for n, t in s.items()} for k, s in state.items()}


def _pointers(optimizer: Any) -> list[int]:
    state = optimizer.state_dict()["state"]
    return [t.data_ptr() for s in state.values() for t in s.values()]


def test_state_loads_into_the_live_optimizer_in_place_and_into_a_fresh_one(tmp_path: Path) -> None:
    acc, model, optimizer = _setup(0)
    _train(model, optimizer)
    path = Path(acc.save_state(tmp_path / "ck"))
    assert (path / "optimizer.safetensors").exists() and not (path / "optimizer.bin").exists()
    saved = optimizer.state_dict()
    expected = _copy(optimizer)
    pointers = _pointers(optimizer)
    _train(model, optimizer)  # move away from the saved state
    acc.load_state(path)
    assert _pointers(optimizer) == pointers  # read straight into the existing state
    assert _same(expected, optimizer.state_dict()["state"])
    acc2, _, fresh = _setup(1)  # a resume: this optimizer has no state yet
    assert fresh.state_dict()["state"] == {}
    acc2.load_state(path)
    assert _same(expected, fresh.state_dict()["state"])
    assert fresh.state_dict()["param_groups"] == saved["param_groups"]


def test_an_optimizer_that_does_not_fit_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    acc, model, optimizer = _setup(0, 1)
    _train(model, optimizer)
    path = Path(acc.save_state(tmp_path / "ck"))
    acc2, model2, other = _setup(1, 2)  # one more layer: other param group sizes
    _train(model2, other)
    before = _copy(other)
    with pytest.raises((ValueError, RuntimeError)):
        acc2.load_state(path)
    assert _same(before, other.state_dict()["state"])


def test_two_optimizers_get_numbered_files(tmp_path: Path) -> None:
    acc = Accelerator()
    a, b = nn.Linear(2, 2), nn.Linear(2, 1)
    opt_a = torch.optim.SGD(a.parameters(), lr=0.1, momentum=0.9)
    opt_b = torch.optim.Adam(b.parameters(), lr=0.2)
    a, b, opt_a, opt_b = acc.prepare(a, b, opt_a, opt_b)
    (a(torch.ones(1, 2)).sum() + b(torch.ones(1, 2)).sum()).backward()
    opt_a.step()
    opt_b.step()
    path = Path(acc.save_state(tmp_path / "ck"))
    assert (path / "optimizer.safetensors").exists() and (path / "optimizer_1.safetensors").exists()
    expected = [opt_a.state_dict(), opt_b.state_dict()]
    opt_a.optimizer.state.clear()
    opt_b.optimizer.state.clear()
    acc.load_state(path)
    assert _same(expected[0], opt_a.state_dict()) and _same(expected[1], opt_b.state_dict())


def test_safe_serialization_false_and_unstorable_states_use_optimizer_bin(tmp_path: Path) -> None:
    acc = Accelerator()
    model = nn.Linear(2, 2)
    optimizer = torch.optim.SGD([{"params": model.parameters(), "kind": torch.float16}], lr=0.1)
    model, optimizer = acc.prepare(model, optimizer)
    path = Path(acc.save_state(tmp_path / "ck"))  # a dtype in a param group: torch.save
    assert (path / "optimizer.bin").exists() and not (path / "optimizer.safetensors").exists()
    optimizer.param_groups[0]["kind"] = None
    acc.load_state(path)
    assert optimizer.param_groups[0]["kind"] is torch.float16
    acc2, model2, opt2 = _setup(0)
    _train(model2, opt2)
    path2 = Path(acc2.save_state(tmp_path / "ck2", safe_serialization=False))
    assert sorted(p.name for p in path2.glob("*.bin")) == ["optimizer.bin", "pytorch_model.bin"]
    expected = opt2.state_dict()
    opt2.optimizer.state.clear()
    acc2.load_state(path2)
    assert _same(expected, opt2.state_dict())


def test_a_checkpoint_of_the_earlier_layout_still_loads(tmp_path: Path) -> None:
    """Before optimizer.safetensors, the optimizer was torch.saved into optimizer.bin next to
    model.safetensors."""
    acc, model, optimizer = _setup(0)
    _train(model, optimizer)
    path = Path(acc.save_state(tmp_path / "ck"))
    os.remove(path / "optimizer.safetensors")
    torch.save(optimizer.state_dict(), path / "optimizer.bin")
    manifest = json.loads((path / "checkpoint.json").read_text())
    manifest["files"] = {p.name: p.stat().st_size for p in path.iterdir() if p.suffix != ".json"}
    (path / "checkpoint.json").write_text(json.dumps(manifest))
    expected = optimizer.state_dict()
    acc2, _, fresh = _setup(1)
    acc2.load_state(path)
    assert _same(expected, fresh.state_dict())
    os.remove(path / "checkpoint.json")  # no manifest (older still): found by its name
    acc3, _, fresh3 = _setup(2)
    acc3.load_state(path)
    assert _same(expected, fresh3.state_dict())


def _crafted(path: Path, skeleton: Any, tensors: dict[str, torch.Tensor]) -> None:
    save_tensors(tensors, path, metadata={STATE_KEY: json.dumps(skeleton)})


@pytest.mark.parametrize(
    ("skeleton", "message"),
    [
        ({"D": [["state", {"D": []}], ["param_groups", {"L": [{"T": "gone"}]}]]}, "gone"),
        ({"D": [["state", {"X": 1}]]}, "unexpected"),
        ({"D": [["state", {"T": "a", "L": []}]]}, "unexpected"),
        ([1, 2], "unexpected"),
        (3, "not a dict"),
        ("{not json", ""),
    ],
    ids=["missing-tensor", "unknown-tag", "two-tags", "a-list", "a-number", "not-json"],
)
def test_a_damaged_optimizer_file_is_named(tmp_path: Path, skeleton: Any, message: str) -> None:
    path = tmp_path / "optimizer.safetensors"
    if skeleton == "{not json":
        save_tensors({"a": torch.ones(1)}, path, metadata={STATE_KEY: skeleton})
    else:
        _crafted(path, skeleton, {"a": torch.ones(2)})
    with pytest.raises(ValueError, match=rf"{path} is corrupt.*{message}"):
        load_optimizer_state(path, {})


def test_tensors_past_the_end_or_of_the_wrong_size_are_named(tmp_path: Path) -> None:
    path = tmp_path / "optimizer.safetensors"
    _crafted(path, {"D": [["state", {"T": "a"}]]}, {"a": torch.ones(4)})
    data = bytearray(path.read_bytes())
    length = int.from_bytes(data[:8], "little")
    header = data[8 : 8 + length].replace(b'"data_offsets":[0,16]', b'"data_offsets":[0,4096]')
    path.write_bytes(data[:8] + header + data[8 + length :])
    with pytest.raises(ValueError, match=rf"{path} is corrupt"):
        load_optimizer_state(path, {})
    header = data[8 : 8 + length].replace(b'"shape":[4]', b'"shape":[9]')
    path.write_bytes(data[:8] + header + data[8 + length :])
    with pytest.raises(ValueError, match=rf"{path} is corrupt.*bytes for shape"):
        load_optimizer_state(path, {})


def test_a_file_without_the_state_metadata_is_named(tmp_path: Path) -> None:
    path = tmp_path / "optimizer.safetensors"
    save_tensors({"a": torch.ones(2)}, path)
    with pytest.raises(ValueError, match=rf"{path} is corrupt.*nbaccel_state"):
        load_optimizer_state(path, {})


# -- the parallel writer and reader ---------------------------------------------------------


def test_files_in_many_pieces_on_several_threads(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(transfer, "CHUNK", 1000)  # every tensor in many pieces
    monkeypatch.setattr(transfer, "io_threads", lambda: 3)
    tensors = [{f"t{i}": torch.randn(1000 + 37 * i) for i in range(5)} for _ in range(3)]
    paths = [tmp_path / f"f{i}.safetensors" for i in range(3)]
    with tensor_files_written(
        [(p, t, {"format": "pt"}) for p, t in zip(paths, tensors, strict=True)]
    ):
        pass
    for path, expected in zip(paths, tensors, strict=True):
        targets = {name: torch.empty_like(t) for name, t in expected.items()}
        pointers = {name: t.data_ptr() for name, t in targets.items()}
        done, rest = load_tensors_into(path, targets)
        assert done == set(expected) and rest == {}
        assert {n: t.data_ptr() for n, t in targets.items()} == pointers
        assert all(torch.equal(targets[n], expected[n]) for n in expected)
        done, fresh = load_tensors_into(path, {})  # into new memory: on the threads
        assert done == set() and all(torch.equal(fresh[n], expected[n]) for n in expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == [p.name for p in paths]


def test_an_error_while_writing_leaves_no_file(tmp_path: Path) -> None:
    files = [(tmp_path / "a.safetensors", {"x": torch.ones(10)}, {"format": "pt"})]
    with pytest.raises(RuntimeError, match="stop"), tensor_files_written(files):
        raise RuntimeError("stop")
    assert list(tmp_path.iterdir()) == []
    missing = tmp_path / "no" / "b.safetensors"
    with (
        pytest.raises(OSError, match=rf"Could not write checkpoint file {missing}"),
        tensor_files_written([(missing, {"x": torch.ones(1)}, {})]),
    ):
        pass
    assert list(tmp_path.iterdir()) == []
