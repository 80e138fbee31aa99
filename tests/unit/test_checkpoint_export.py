"""save_model / load_checkpoint_in_model / get_state_dict / save in one process."""

from __future__ import annotations

import io
import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from nbaccel import Accelerator, load_checkpoint_in_model
from nbaccel.checkpoint import parse_size
from nbaccel.utils import load_checkpoint_in_model as from_utils


class Tied(nn.Module):
    """An embedding tied to the output layer, plus a buffer."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(20, 8)
        self.body = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8))
        self.head = nn.Linear(8, 20, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.rand(8))


def equal_state(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def export(tmp_path: Path, **kwargs: Any) -> tuple[nn.Module, Path]:
    acc = Accelerator()
    model = acc.prepare(Tied(0))
    acc.save_model(model, tmp_path / "out", **kwargs)
    return model, tmp_path / "out"


def test_sharded_safetensors_layout_and_reload(tmp_path: Path) -> None:
    model, out = export(tmp_path, max_shard_size=300)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(p.name for p in out.glob("*.safetensors"))
    assert len(shards) > 2 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    assert sorted(set(index["weight_map"].values())) == shards
    keys = set(model.state_dict()) - {"head.weight"}  # the tied copy is stored once
    assert set(index["weight_map"]) == keys
    assert index["metadata"]["total_size"] == sum(model.state_dict()[k].numel() * 4 for k in keys)
    fresh = Tied(1)
    assert not equal_state(fresh, model)
    load_checkpoint_in_model(fresh, out, device_map={"": "cpu"}, strict=True)
    assert equal_state(fresh, model)
    assert fresh.head.weight is fresh.embed.weight  # still shared after reload


def test_sharded_export_through_safetensors_alone(tmp_path: Path) -> None:
    model, out = export(tmp_path, max_shard_size="0.7KB")
    index = json.loads((out / "model.safetensors.index.json").read_text())
    weights: dict[str, torch.Tensor] = {}
    for name in set(index["weight_map"].values()):
        weights.update(load_file(out / name))
    fresh = Tied(2)
    result = fresh.load_state_dict(weights, strict=False)
    assert result.missing_keys == ["head.weight"] and not result.unexpected_keys
    assert equal_state(fresh, model)


@pytest.mark.parametrize("which", ["index", "file", "directory"])
def test_load_checkpoint_in_model_accepts_file_index_directory(tmp_path: Path, which: str) -> None:
    if which == "file":
        model, out = export(tmp_path)
        target: Path = out / "model.safetensors"
        assert sorted(p.name for p in out.iterdir()) == ["model.safetensors"]
    else:
        model, out = export(tmp_path, max_shard_size=500)
        target = out / "model.safetensors.index.json" if which == "index" else out
    fresh = Tied(3)
    from_utils(fresh, str(target), strict=True)
    assert equal_state(fresh, model)


def test_pytorch_bin_for_the_seed_recipe(tmp_path: Path) -> None:
    model, out = export(tmp_path, safe_serialization=False)
    fresh = Tied(4)
    fresh.load_state_dict(torch.load(out / "pytorch_model.bin"))  # the quick tour's load
    assert equal_state(fresh, model) and fresh.head.weight is fresh.embed.weight
    model, out = export(tmp_path, safe_serialization=False, max_shard_size=600)
    assert (out / "pytorch_model.bin.index.json").exists()
    assert not (out / "pytorch_model.bin").exists()  # the earlier single file was removed
    fresh = Tied(5)
    load_checkpoint_in_model(fresh, out, strict=True)
    assert equal_state(fresh, model) and fresh.head.weight is fresh.embed.weight


def test_reexport_removes_stale_shards(tmp_path: Path) -> None:
    export(tmp_path, max_shard_size=300)
    _, out = export(tmp_path)
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors"]


def test_dtype_device_map_and_meta_model(tmp_path: Path) -> None:
    model, out = export(tmp_path, max_shard_size=500)
    fresh = Tied(6).to(torch.float64)
    load_checkpoint_in_model(
        fresh, out, device_map={"embed": "cpu", "body": "cpu", "": "cpu"}, dtype="float16"
    )
    assert fresh.embed.weight.dtype == torch.float16
    assert torch.equal(fresh.embed.weight, model.embed.weight.half())
    assert fresh.head.weight is fresh.embed.weight
    with torch.device("meta"):
        empty = Tied(7)
    load_checkpoint_in_model(empty, out, strict=True)
    assert equal_state(empty, model) and empty.head.weight is empty.embed.weight


def test_mismatches_are_clear(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _, out = export(tmp_path)
    other = nn.Sequential(nn.Linear(8, 8))
    with pytest.raises(RuntimeError, match=r"missing keys .*unexpected keys"):
        load_checkpoint_in_model(other, out, strict=True)
    with caplog.at_level(logging.WARNING):
        load_checkpoint_in_model(other, out)
    assert "were not used when initializing Sequential" in caplog.text
    assert "missing keys ['0.bias', '0.weight']" in caplog.text
    wrong = Tied(0)
    wrong.body[0] = nn.Linear(8, 4)
    with pytest.raises(
        ValueError, match=r"'body.0.(weight|bias)' has shape \(8,.*in the checkpoint but \(4,"
    ):
        load_checkpoint_in_model(wrong, out)
    with pytest.raises(FileNotFoundError, match="holds none of"):
        load_checkpoint_in_model(Tied(0), tmp_path)
    with pytest.raises(ValueError, match="device_map does not place"):
        load_checkpoint_in_model(Tied(0), out, device_map={"body": "cpu"})
    with pytest.raises(ValueError, match="offload_folder"):
        load_checkpoint_in_model(Tied(0), out, device_map={"": "disk"})


def test_missing_shard_is_named(tmp_path: Path) -> None:
    _, out = export(tmp_path, max_shard_size=500)
    second = sorted(out.glob("model-00002-of-*.safetensors"))[0]
    os.remove(second)
    with pytest.raises(FileNotFoundError, match=second.name):
        load_checkpoint_in_model(Tied(0), out)


def test_crafted_bin_export_never_runs(tmp_path: Path) -> None:
    sentinel = tmp_path / "pwned"

    class Evil:
        def __reduce__(self) -> Any:
            return (os.system, (f"touch {sentinel}",))

    (tmp_path / "out").mkdir()
    torch.save({"embed.weight": Evil()}, tmp_path / "out" / "pytorch_model.bin")
    with pytest.raises(ValueError, match="Refusing to load"):
        load_checkpoint_in_model(Tied(0), tmp_path / "out")
    assert not sentinel.exists()


def test_parse_size() -> None:
    assert parse_size("10GB") == 10 * 10**9 and parse_size("2GiB") == 2 * 2**30
    assert parse_size("500MB") == 5 * 10**8 and parse_size(123) == 123
    for bad in ("ten", "5XB", 0, "-1GB"):
        with pytest.raises(ValueError, match="max_shard_size"):
            parse_size(bad)  # type: ignore[arg-type]


def test_get_state_dict_and_save(tmp_path: Path) -> None:
    acc = Accelerator()
    model = acc.prepare(Tied(0))
    state = acc.get_state_dict(model)
    assert state.keys() == Tied(0).state_dict().keys()
    acc.save({"a": [1, 2], "t": torch.ones(2)}, tmp_path / "obj.pkl")
    assert torch.load(tmp_path / "obj.pkl")["a"] == [1, 2]
    acc.save(state, str(tmp_path / "w.safetensors"), safe_serialization=True)
    loaded = load_file(tmp_path / "w.safetensors")
    assert set(loaded) == set(state) - {"head.weight"}
    buffer = io.BytesIO()
    acc.save([0, 1, 2, 3], buffer)
    buffer.seek(0)
    assert torch.load(buffer) == [0, 1, 2, 3]
