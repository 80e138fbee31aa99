"""Collectives on the one XLA device, and checkpoints of a model that trains on it."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from nbaccel import Accelerator


def test_collectives_on_one_xla_device_return_device_tensors() -> None:
    accelerator = Accelerator()
    values = torch.arange(6.0, device=accelerator.device).reshape(2, 3)
    for result in (
        accelerator.gather(values),
        accelerator.reduce(values, "sum"),
        accelerator.reduce(values, "mean"),
        accelerator.pad_across_processes(values, dim=1),
        accelerator.gather_for_metrics(values),
    ):
        assert result.device.type == "xla"
        assert torch.equal(result.cpu(), values.cpu())
    nested = accelerator.gather({"a": values, "b": [values[0]]})
    assert torch.equal(nested["b"][0].cpu(), values[0].cpu())
    assert accelerator.gather_for_metrics([1, "two"], use_gather_object=True) == [1, "two"]


def _trained(accelerator: Accelerator) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    loss = model(torch.randn(8, 4, device=accelerator.device)).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    return model, optimizer


def _cpu(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in tensors.items()}


def test_save_state_writes_cpu_safetensors_and_load_state_restores_on_xla(
    tmp_path: Path,
) -> None:
    accelerator = Accelerator()
    model, optimizer = _trained(accelerator)
    weights = _cpu(model.state_dict())
    moments = _cpu(optimizer.state_dict()["state"][0])
    accelerator.save_state(tmp_path / "ckpt")
    with safe_open(str(tmp_path / "ckpt" / "model.safetensors"), "pt") as saved:
        assert sorted(saved.keys()) == sorted(weights)
        for name in sorted(saved.keys()):  # written as CPU tensors, read back anywhere
            torch.testing.assert_close(saved.get_tensor(name), weights[name], rtol=0, atol=0)
    assert (tmp_path / "ckpt" / "optimizer.safetensors").is_file()
    with torch.no_grad():  # change everything, then restore
        for param in model.parameters():
            param.add_(1.0)
    accelerator.backward(model(torch.ones(2, 4, device=accelerator.device)).sum())
    optimizer.step()
    accelerator.load_state(tmp_path / "ckpt")
    assert all(p.device.type == "xla" for p in model.parameters())
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value.cpu(), weights[name], rtol=0, atol=0)
    state = optimizer.state_dict()["state"][0]
    assert state["exp_avg"].device.type == "xla"
    for name, value in moments.items():
        torch.testing.assert_close(state[name].cpu(), value, rtol=0, atol=0)
    # training goes on from the restored state
    accelerator.backward(model(torch.ones(2, 4, device=accelerator.device)).sum())
    optimizer.step()
    assert not torch.equal(model[0].weight.cpu(), weights["0.weight"])


def test_save_model_and_unwrap_model_on_xla(tmp_path: Path) -> None:
    accelerator = Accelerator()
    model, _ = _trained(accelerator)
    plain = accelerator.unwrap_model(model)
    assert isinstance(plain, nn.Sequential) and plain[0].weight.device.type == "xla"
    accelerator.save_model(model, tmp_path / "export")
    with safe_open(str(tmp_path / "export" / "model.safetensors"), "pt") as saved:
        loaded = {name: saved.get_tensor(name) for name in sorted(saved.keys())}
    assert all(t.device.type == "cpu" for t in loaded.values())
    fresh = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    fresh.load_state_dict(loaded)  # the export loads into a plain CPU model
    for name, value in fresh.state_dict().items():
        torch.testing.assert_close(value, plain.state_dict()[name].cpu(), rtol=0, atol=0)
