"""LocalSGD on one process: a no-op that still counts steps and trains as plain PyTorch does,
the setups it refuses (as Accelerate refuses them), and its argument checks. Several ranks:
tests/multiprocess/test_local_sgd_multiprocess.py."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import accelerate
import accelerate.local_sgd
import accelerate.state
import pytest
import torch
from torch import nn

import nbaccel.local_sgd
from nbaccel import Accelerator, DistributedType
from nbaccel.local_sgd import LocalSGD

STEPS = 5


@pytest.fixture
def accelerate_state() -> Iterator[None]:
    """Accelerate's own state, forgotten after the test."""
    accelerate.state.AcceleratorState._reset_state(reset_partial_state=True)
    yield
    accelerate.state.AcceleratorState._reset_state(reset_partial_state=True)


def model_and_optimizer() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step)
    x = torch.randn(8, 3, generator=generator)
    return x, x.sum(dim=1, keepdim=True)


def weights(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def train(accelerator: Any, model: nn.Module, optimizer: Any, local_sgd: Any = None) -> None:
    for step in range(STEPS):
        x, y = batch(step)
        accelerator.backward(nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
        if local_sgd is not None:
            local_sgd.step()


def test_the_path_and_signature_are_accelerates() -> None:
    assert nbaccel.local_sgd.LocalSGD is LocalSGD
    ours = inspect.signature(LocalSGD.__init__).parameters
    theirs = inspect.signature(accelerate.local_sgd.LocalSGD.__init__).parameters
    assert list(ours) == list(theirs)
    assert [p.default for p in ours.values()] == [p.default for p in theirs.values()]


def test_on_one_process_it_counts_steps_and_trains_as_plain_pytorch() -> None:
    accelerator = Accelerator(cpu=True)
    assert accelerator.distributed_type == DistributedType.NO
    model, optimizer = accelerator.prepare(*model_and_optimizer())
    with LocalSGD(accelerator, model, local_sgd_steps=2) as local_sgd:
        assert isinstance(local_sgd, LocalSGD)
        assert local_sgd.enabled is False  # nothing to average with
        train(accelerator, model, optimizer, local_sgd)
    assert local_sgd.num_steps == STEPS

    plain, plain_optimizer = model_and_optimizer()
    for step in range(STEPS):
        x, y = batch(step)
        nn.functional.mse_loss(plain(x), y).backward()
        plain_optimizer.step()
        plain_optimizer.zero_grad()
    for got, expected in zip(weights(model), weights(plain), strict=True):
        torch.testing.assert_close(got, expected)
    assert not torch.equal(weights(plain)[0], weights(model_and_optimizer()[0])[0])


def test_on_one_process_accelerate_is_a_no_op_too(accelerate_state: None) -> None:
    theirs = accelerate.Accelerator(cpu=True)
    model, optimizer = theirs.prepare(*model_and_optimizer())
    with accelerate.local_sgd.LocalSGD(theirs, model, local_sgd_steps=2) as local_sgd:
        train(theirs, model, optimizer, local_sgd)
    ours = Accelerator(cpu=True)
    ours_model, ours_optimizer = ours.prepare(*model_and_optimizer())
    with LocalSGD(ours, ours_model, local_sgd_steps=2) as ours_local_sgd:
        train(ours, ours_model, ours_optimizer, ours_local_sgd)
    assert (ours_local_sgd.enabled, ours_local_sgd.num_steps) == (
        local_sgd.enabled,
        local_sgd.num_steps,
    )
    for got, expected in zip(weights(ours_model), weights(model), strict=True):
        torch.testing.assert_close(got, expected)


def test_an_error_in_the_block_goes_up_unchanged() -> None:
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(model_and_optimizer()[0])
    with pytest.raises(KeyError, match="mine"), LocalSGD(accelerator, model, 2):
        raise KeyError("mine")


@pytest.mark.parametrize(
    "kind",
    [
        DistributedType.FSDP,
        DistributedType.XLA,
        DistributedType.DEEPSPEED,
        DistributedType.MEGATRON_LM,
    ],
)
def test_refuses_what_accelerate_refuses(kind: DistributedType, accelerate_state: None) -> None:
    theirs = accelerate.Accelerator(cpu=True)
    theirs.state.distributed_type = accelerate.DistributedType(kind.value)
    with pytest.raises(NotImplementedError):
        accelerate.local_sgd.LocalSGD(theirs, nn.Linear(1, 1), local_sgd_steps=2)

    accelerator = Accelerator(cpu=True)
    accelerator.state.distributed_type = kind
    advice = "without fsdp_plugin" if kind == DistributedType.FSDP else "Train without LocalSGD"
    with pytest.raises(NotImplementedError, match=f"runs {kind.name}, where it is not supported"):
        LocalSGD(accelerator, nn.Linear(1, 1), local_sgd_steps=2)
    with pytest.raises(NotImplementedError, match=advice):
        LocalSGD(accelerator, nn.Linear(1, 1), local_sgd_steps=2)
    accelerator.state.distributed_type = DistributedType.MULTI_CPU  # what Accelerate accepts
    assert LocalSGD(accelerator, nn.Linear(1, 1), local_sgd_steps=2).enabled is True


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"local_sgd_steps": 0}, ValueError, "at least 1"),
        ({"local_sgd_steps": -2}, ValueError, "at least 1"),
        ({"local_sgd_steps": 2.0}, ValueError, "must be an int"),
        ({"local_sgd_steps": True}, ValueError, "must be an int"),
        ({"local_sgd_steps": 2, "enabled": "yes"}, TypeError, "True or False"),
        ({"local_sgd_steps": 2, "model": "model"}, TypeError, "accelerator.prepare"),
    ],
)
def test_bad_arguments_say_what_is_expected(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    accelerator = Accelerator(cpu=True)
    arguments = {"model": nn.Linear(1, 1), **kwargs}
    with pytest.raises(error, match=match):
        LocalSGD(accelerator, **arguments)
