"""The quick tour's loop under Accelerator() on torch_xla's CPU device (one XLA core)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch_xla.debug.metrics as metrics
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from nbaccel import Accelerator

# Weights after the XLA run equal a plain CPU run of the same loop to within this: both are
# float32, but XLA fuses and orders some operations differently from eager CPU kernels.
TOLERANCE = 1e-5
STEPS = 6  # 48 samples in batches of 8


def _setup() -> tuple[nn.Module, torch.optim.Optimizer, DataLoader]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    data = TensorDataset(torch.randn(48, 8), torch.randn(48, 1))
    return model, optimizer, DataLoader(data, batch_size=8)


def _plain_cpu_run() -> dict[str, torch.Tensor]:
    model, optimizer, loader = _setup()
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_quick_tour_loop_trains_on_the_xla_device_like_a_plain_cpu_run() -> None:
    expected = _plain_cpu_run()
    model, optimizer, loader = _setup()
    initial = copy.deepcopy(model.state_dict())
    accelerator = Accelerator()
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    # prepare moved the model, and pointed the optimizer at the moved parameters
    assert all(p.device.type == "xla" for p in model.parameters())
    moved = {id(p) for p in model.parameters()}
    assert [id(p) for g in optimizer.param_groups for p in g["params"]] == [
        id(p) for p in model.parameters()
    ]
    assert moved
    marks = metrics.counter_value("MarkStep") or 0
    batches = 0
    for x, y in loader:
        assert x.device.type == "xla" and y.device.type == "xla"  # the loader yields on device
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        batches += 1
    assert batches == STEPS
    # a step is marked before each batch and at the end of the pass, as torch_xla's loader does
    assert (metrics.counter_value("MarkStep") or 0) - marks == STEPS + 1
    trained = {k: v.cpu() for k, v in accelerator.unwrap_model(model).state_dict().items()}
    assert any(not torch.equal(trained[k], initial[k]) for k in initial)  # it trained
    for name, value in expected.items():
        torch.testing.assert_close(trained[name], value, rtol=0, atol=TOLERANCE)


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(tokens))


def test_tied_weights_stay_tied_on_the_xla_device_and_train_as_one() -> None:
    torch.manual_seed(0)
    accelerator = Accelerator()
    model = TiedLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model, optimizer = accelerator.prepare(model, optimizer)
    assert model.head.weight is model.embed.weight
    assert model.embed.weight.device.type == "xla"
    assert optimizer.param_groups[0]["params"] == [model.embed.weight]
    before = model.embed.weight.detach().cpu().clone()
    tokens = torch.tensor([[1, 2, 3]], device=accelerator.device)
    loss = nn.functional.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten())
    accelerator.backward(loss)
    optimizer.step()
    assert model.head.weight is model.embed.weight
    assert not torch.equal(model.embed.weight.detach().cpu(), before)


def test_bf16_autocasts_on_the_xla_device_and_trains() -> None:
    accelerator = Accelerator(mixed_precision="bf16")
    assert accelerator.mixed_precision == "bf16"
    model, optimizer, loader = accelerator.prepare(*_setup())
    for x, y in loader:
        with accelerator.autocast():
            hidden = model[0](x)
        assert hidden.dtype == torch.bfloat16  # the matmul ran in bfloat16
        out = model(x)
        assert out.dtype == torch.float32  # prepared forward: outputs back in float32
        accelerator.backward(nn.functional.mse_loss(out, y))
        optimizer.step()
        optimizer.zero_grad()
    assert all(p.dtype == torch.float32 for p in model.parameters())  # weights stay float32
    assert torch.isfinite(out).all()


def test_fp16_is_refused_on_the_xla_device() -> None:
    with pytest.raises(ValueError, match="use mixed_precision='bf16'"):
        Accelerator(mixed_precision="fp16")
    assert Accelerator().mixed_precision == "no"  # the refused setting did not stick


def test_accumulation_clipping_and_scheduler_on_the_xla_device() -> None:
    accelerator = Accelerator(gradient_accumulation_steps=2)
    model, optimizer, loader = _setup()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    updates, norms = 0, []
    for x, y in loader:
        with accelerator.accumulate(model):
            accelerator.backward(nn.functional.mse_loss(model(x), y))
            if accelerator.sync_gradients:
                norms.append(accelerator.clip_grad_norm_(model.parameters(), 0.5))
                updates += 1
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    assert updates == STEPS // 2
    assert all(n.device.type == "xla" and float(n) > 0 for n in norms)
    assert scheduler.get_last_lr() == [pytest.approx(0.05 * 0.5**updates)]
