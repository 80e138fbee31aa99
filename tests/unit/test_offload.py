"""Big-model inference on the CPU: a model dispatched over the CPU and an offload folder on
disk, whole-model CPU and disk offload, the hooks, and saving a model whose weights are
offloaded.

Real modules and real files throughout. The CPU is the only device here, so it is the
execution device; Accelerate's own use puts the execution device on a GPU (an int in the
device map) and offloads to "cpu" and "disk": the CUDA test at the end does that where there is
a GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from nbaccel import (
    Accelerator,
    cpu_offload,
    cpu_offload_with_hook,
    disk_offload,
    dispatch_model,
    infer_auto_device_map,
    init_empty_weights,
    load_checkpoint_and_dispatch,
    load_checkpoint_in_model,
)
from nbaccel.hooks import AlignDevicesHook, attach_align_device_hook, remove_hook_from_module
from nbaccel.utils import (
    OffloadedWeightsLoader,
    get_state_dict_from_offload,
    has_offloaded_params,
    load_offloaded_weight,
    offload_weight,
)


class Net(nn.Module):
    """Two linear layers around a block with a batch norm (buffers) and a nested linear."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.linear1 = nn.Linear(3, 8)
        self.block = nn.Sequential(nn.BatchNorm1d(8), nn.Linear(8, 8))
        self.linear2 = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(torch.relu(self.block(self.linear1(x))))


class TiedNet(nn.Module):
    """An embedding tied to the output layer."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(10, 6)
        self.mid = nn.Linear(6, 6)
        self.head = nn.Linear(6, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.mid(self.embed(ids)))


MAP = {"linear1": "cpu", "block": "disk", "linear2": "cpu"}
INPUT = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))


def reference() -> tuple[nn.Module, torch.Tensor]:
    model = Net().eval()
    with torch.no_grad():
        model.block[0].running_mean.uniform_(-0.5, 0.5)  # buffers that are not the defaults
    return model, model(INPUT)


def dispatched(tmp_path: Path, safe: bool = True) -> tuple[nn.Module, torch.Tensor]:
    """``Net`` saved by save_model, loaded empty into a new one with ``MAP``."""
    model, expected = reference()
    Accelerator().save_model(model, tmp_path / "ckpt", safe_serialization=safe)
    with init_empty_weights():
        empty = Net(seed=1).eval()
    load_checkpoint_and_dispatch(
        empty, tmp_path / "ckpt", device_map=MAP, offload_folder=tmp_path / "offload"
    )
    return empty, expected


def test_dispatch_over_cpu_and_disk_gives_the_plain_models_outputs(tmp_path: Path) -> None:
    model, expected = dispatched(tmp_path)
    assert torch.allclose(model(INPUT), expected, atol=1e-6)
    assert torch.allclose(model(INPUT), expected, atol=1e-6)  # and again: files read again
    # the disk block's parameters wait on meta; its buffers stay in memory
    assert model.block[1].weight.device.type == "meta"
    assert model.block[0].running_mean.device.type == "cpu"
    assert model.linear1.weight.device.type == "cpu"
    assert has_offloaded_params(model.block[1]) and not has_offloaded_params(model.linear1)
    index = json.loads((tmp_path / "offload" / "index.json").read_text())
    assert {"block.1.weight", "block.1.bias", "block.0.weight"} <= set(index)
    assert index["block.1.weight"] == {"dtype": "float32", "shape": [8, 8]}
    assert (tmp_path / "offload" / "block.1.weight.dat").stat().st_size == 8 * 8 * 4
    assert model.hf_device_map == MAP


@pytest.mark.parametrize("safe", [True, False])
def test_save_model_of_an_offloaded_model_writes_the_real_weights(
    tmp_path: Path, safe: bool
) -> None:
    model, expected = dispatched(tmp_path, safe)
    original = reference()[0].state_dict()
    accelerator = Accelerator()
    state = accelerator.get_state_dict(model)
    assert state.keys() == original.keys()
    assert all(torch.equal(state[k], original[k]) for k in original)
    accelerator.save_model(model, tmp_path / "again", safe_serialization=safe)
    if safe:
        written = load_file(tmp_path / "again" / "model.safetensors")
    else:
        written = torch.load(tmp_path / "again" / "pytorch_model.bin", weights_only=True)
    assert written.keys() == original.keys()
    assert all(torch.equal(written[k], original[k]) for k in original)
    fresh = Net(seed=2).eval()
    load_checkpoint_in_model(fresh, tmp_path / "again", strict=True)
    assert torch.allclose(fresh(INPUT), expected, atol=1e-6)
    # the offloaded model still runs after being saved
    assert torch.allclose(model(INPUT), expected, atol=1e-6)


def test_tied_weights_stored_once_are_offloaded_under_each_name(tmp_path: Path) -> None:
    model = TiedNet().eval()
    ids = torch.tensor([[1, 2, 3]])
    expected = model(ids)
    Accelerator().save_model(model, tmp_path / "ckpt")  # safetensors: head.weight left out
    with init_empty_weights():
        empty = TiedNet().eval()
    empty.head.weight = empty.embed.weight  # tie again, as Transformers' tie_weights() does
    device_map = {"embed": "disk", "mid": "cpu", "head": "disk"}
    load_checkpoint_and_dispatch(
        empty, tmp_path / "ckpt", device_map=device_map, offload_folder=tmp_path / "off"
    )
    assert (tmp_path / "off" / "head.weight.dat").is_file()
    assert torch.allclose(empty(ids), expected, atol=1e-6)


def test_the_auto_map_on_a_small_cpu_budget_offloads_the_rest_to_disk(tmp_path: Path) -> None:
    model = nn.Sequential(*[nn.Linear(16, 16) for _ in range(4)]).eval()
    x = torch.randn(2, 16)
    expected = model(x)
    Accelerator().save_model(model, tmp_path / "ckpt")
    # 1088 bytes a layer; the CPU keeps room for the largest one that comes back from disk
    budget = {"cpu": 3000}
    assert infer_auto_device_map(model, max_memory=budget) == {
        "0": "cpu",
        "1": "disk",
        "2": "disk",
        "3": "disk",
    }
    assert infer_auto_device_map(model, max_memory={"cpu": 10**6}) == {"": "cpu"}
    with init_empty_weights():
        empty = nn.Sequential(*[nn.Linear(16, 16) for _ in range(4)]).eval()
    load_checkpoint_and_dispatch(
        empty, tmp_path / "ckpt", "auto", max_memory=budget, offload_folder=tmp_path / "off"
    )
    assert empty.hf_device_map["1"] == "disk"
    assert torch.allclose(empty(x), expected, atol=1e-6)


def test_whole_model_cpu_and_disk_offload(tmp_path: Path) -> None:
    model, expected = reference()
    cpu_offload(model, execution_device=torch.device("cpu"))
    assert model.linear1.weight.device.type == "meta"
    assert torch.allclose(model(INPUT), expected, atol=1e-6)
    assert model.linear1.weight.device.type == "meta"  # back on meta after the call
    model, expected = reference()
    disk_offload(model, tmp_path / "whole", execution_device=torch.device("cpu"))
    assert (tmp_path / "whole" / "linear2.weight.dat").is_file()
    assert torch.allclose(model(INPUT), expected, atol=1e-6)
    state = Accelerator().get_state_dict(model)
    assert torch.equal(state["linear2.weight"], reference()[0].linear2.weight)


def test_moving_a_dispatched_model_with_offloaded_weights_is_refused(tmp_path: Path) -> None:
    model, _ = dispatched(tmp_path)
    with pytest.raises(RuntimeError, match="offloaded to cpu or disk"):
        model.to("cpu")
    remove_hook_from_module(model, recurse=True)
    assert "to" not in model.__dict__ and "_hf_hook" not in model.block[1].__dict__


def test_has_offloaded_params_and_detaching_brings_the_weights_back() -> None:
    model, expected = reference()
    weight = model.linear1.weight.detach().clone()
    assert not has_offloaded_params(model)
    attach_align_device_hook(model, offload=False)
    assert not has_offloaded_params(model.linear1)
    remove_hook_from_module(model, recurse=True)
    model, _ = cpu_offload_with_hook(model)
    assert not has_offloaded_params(model)
    remove_hook_from_module(model)
    attach_align_device_hook(model, execution_device="cpu", offload=True)
    assert has_offloaded_params(model.linear1) and not has_offloaded_params(model)
    assert isinstance(model.linear1._hf_hook, AlignDevicesHook)
    assert model.linear1.weight.device.type == "meta"
    assert torch.allclose(model(INPUT), expected, atol=1e-6)
    remove_hook_from_module(model, recurse=True)
    assert torch.equal(model.linear1.weight, weight)  # detaching puts the values back


def test_cpu_offload_with_hook_runs_the_model_on_its_execution_device() -> None:
    first, expected = reference()
    second = nn.Linear(5, 2)
    first, hook1 = cpu_offload_with_hook(first, execution_device="cpu")
    second, hook2 = cpu_offload_with_hook(second, execution_device="cpu", prev_module_hook=hook1)
    out = first(INPUT)
    assert torch.allclose(out, expected, atol=1e-6)
    assert next(first.parameters()).device == torch.device("cpu")
    second(out)  # would send `first` back to the CPU first, were it elsewhere
    hook2.offload()
    assert next(second.parameters()).device == torch.device("cpu")
    hook1.remove()
    assert "_hf_hook" not in first.__dict__ and torch.allclose(first(INPUT), expected)


def test_get_state_dict_from_offload_reads_an_offloaded_module(tmp_path: Path) -> None:
    model, _ = dispatched(tmp_path)
    original = reference()[0]
    filled = get_state_dict_from_offload(
        model.block[1], "block.1.weight", {"block.1.weight": None}, device_to_put_offload="cpu"
    )
    assert torch.equal(filled["block.1.weight"], original.block[1].weight)
    assert model.block[1].weight.device.type == "meta"  # and it is offloaded again


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64])
def test_offloaded_weight_files_round_trip(tmp_path: Path, dtype: torch.dtype) -> None:
    index: dict[str, dict[str, object]] = {}
    for name, tensor in {"w": torch.randn(3, 4).to(dtype), "s": torch.tensor(2).to(dtype)}.items():
        offload_weight(tensor, name, tmp_path, index=index)
        back = load_offloaded_weight(tmp_path / f"{name}.dat", index[name])
        assert back.dtype == dtype and torch.equal(back, tensor)
    assert index["w"] == {"dtype": str(dtype).split(".")[1], "shape": [3, 4]}
    (tmp_path / "index.json").write_text(json.dumps(index))
    loader = OffloadedWeightsLoader(state_dict={"m": torch.ones(1)}, save_folder=tmp_path)
    assert sorted(loader) == ["m", "s", "w"] and loader["s"].shape == ()


def test_dispatch_model_needs_an_offload_folder_for_disk() -> None:
    with pytest.raises(ValueError, match="offload_dir"):
        dispatch_model(Net(), {"linear1": "cpu", "block": "disk", "linear2": "cpu"})
    with pytest.raises(ValueError, match="does not give any device"):
        dispatch_model(Net(), {"linear1": "cpu"})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_cpu_and_disk_modules_run_on_the_gpu(tmp_path: Path) -> None:
    model, expected = reference()
    Accelerator().save_model(model, tmp_path / "ckpt")
    with init_empty_weights():
        empty = Net(seed=1).eval()
    device_map = {"linear1": 0, "block": "disk", "linear2": "cpu"}
    load_checkpoint_and_dispatch(
        empty, tmp_path / "ckpt", device_map=device_map, offload_folder=tmp_path / "off"
    )
    assert empty.linear1.weight.device.type == "cuda"
    assert empty.linear2.weight.device.type == "meta"  # CPU-offloaded: on the GPU per call
    out = empty(INPUT)  # the input comes from the CPU, the output goes back there
    assert out.device.type == "cpu" and torch.allclose(out, expected, atol=1e-5)
    state = Accelerator().get_state_dict(empty)
    assert all(t.device.type == "cpu" for t in state.values())
    net, _ = reference()
    net, hook = cpu_offload_with_hook(net, execution_device=0)
    assert next(net.parameters()).device.type == "cpu"
    assert torch.allclose(net(INPUT).cpu(), expected, atol=1e-5)
    assert next(net.parameters()).device.type == "cuda"  # it stays there after the call
    hook.offload()
    assert next(net.parameters()).device.type == "cpu"
