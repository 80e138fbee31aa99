"""Behaviour that matches Accelerate's: the optimizer of no prepared model, unwrap_model with
torch.compile, regional compilation, a settable sync_gradients and a picklable optimizer."""

from __future__ import annotations

import pickle
import warnings

import pytest
import torch
from torch import nn

from nbaccel import Accelerator, TorchDynamoPlugin
from nbaccel.modeling import recompiled
from nbaccel.optim import AcceleratedOptimizer


def tiny(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))


def sgd(model: nn.Module, lr: float = 0.1) -> torch.optim.SGD:
    return torch.optim.SGD(model.parameters(), lr=lr)


def test_an_optimizer_of_another_model_is_a_warning_naming_both() -> None:
    acc = Accelerator()
    model, other = tiny(), tiny(1)
    match = r"optimizer SGD holds none of the parameters.*\(Sequential\).*model.parameters\(\)"
    with pytest.warns(UserWarning, match=match) as caught:
        prepared, optimizer = acc.prepare(model, sgd(other))
    assert caught[0].filename == __file__  # points at the prepare() call
    assert acc._models == [prepared] and isinstance(optimizer, AcceleratedOptimizer)
    before = [p.detach().clone() for p in prepared.parameters()]
    acc.backward(prepared(torch.ones(2, 3)).sum())
    optimizer.step()  # steps the other model's (gradient-free) parameters: nothing changes
    assert all(torch.equal(a, b) for a, b in zip(before, prepared.parameters(), strict=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        acc.prepare(sgd(model))  # an optimizer of the prepared model: no warning


def test_unwrap_model_keep_torch_compile() -> None:
    """As in Accelerate: a compiled model stays compiled around the user's model unless
    ``keep_torch_compile=False``; the prepared model is never modified."""
    acc = Accelerator()
    model = tiny()
    compiled = torch.compile(model, backend="eager")
    prepared = acc.prepare(compiled)
    assert acc.unwrap_model(prepared) is prepared and prepared._orig_mod is model
    assert acc.unwrap_model(prepared, keep_torch_compile=False) is model
    outer = torch.compile(nn.Sequential(model), backend="eager")  # compiled around a wrapper
    rebuilt = recompiled(outer, model)
    assert rebuilt is not outer and rebuilt._orig_mod is model and outer._orig_mod[0] is model
    assert rebuilt(torch.ones(2, 3)).shape == (2, 1)


class _Layers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(3, 3) for _ in range(3)])
        self.head = nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return self.head(x)


def test_regional_compilation_compiles_each_block() -> None:
    torch._dynamo.reset()
    model, x = _Layers(), torch.randn(2, 3)
    expected = model(x)
    plugin = TorchDynamoPlugin(backend="eager", use_regional_compilation=True)
    acc = Accelerator(dynamo_plugin=plugin)
    prepared = acc.prepare(model)
    compiled = torch._dynamo.eval_frame.OptimizedModule
    assert all(isinstance(block, compiled) for block in prepared.layers)
    assert isinstance(prepared.head, compiled) and not isinstance(model.layers[0], compiled)
    torch.testing.assert_close(prepared(x), expected)
    assert acc.unwrap_model(prepared) is model
    torch._dynamo.reset()


def test_sync_gradients_is_settable_and_optimizer_pickles() -> None:
    acc = Accelerator()
    model = tiny()
    model, optimizer = acc.prepare(model, sgd(model, lr=0.25))
    acc.sync_gradients = False
    assert acc.gradient_state.sync_gradients is False and acc.sync_gradients is False
    before = [p.detach().clone() for p in model.parameters()]
    acc.backward(model(torch.ones(2, 3)).sum())
    optimizer.step()  # not a synchronising step: no update, as the flag says
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    acc.gradient_state.sync_gradients = True
    assert acc.sync_gradients is True
    copy = pickle.loads(pickle.dumps(optimizer))
    assert isinstance(copy, AcceleratedOptimizer) and copy.param_groups[0]["lr"] == 0.25
    assert copy.state_dict()["param_groups"] == optimizer.state_dict()["param_groups"]
    scheduler = acc.prepare(torch.optim.lr_scheduler.StepLR(optimizer.optimizer, 1, gamma=0.5))
    assert pickle.loads(pickle.dumps(scheduler)).get_last_lr() == [0.25]
