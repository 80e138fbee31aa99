"""Rank-side training with LocalSGD on one real gloo process group: every rank records its
gradients and parameters at each step, for tests/multiprocess/test_local_sgd_multiprocess.py
to compare across ranks and with the average computed there."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from nbaccel import Accelerator
from nbaccel.local_sgd import LocalSGD

LOCAL_SGD_STEPS = 3
STEPS = 7  # not a multiple: leaving the block averages the last steps
LR = 0.1


def initial_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))


def rank_batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Data that differs on every rank and step."""
    generator = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(8, 3, generator=generator)
    return x, x.sum(dim=1, keepdim=True) * (rank + 1)


def loss_of(model: nn.Module, rank: int, step: int) -> torch.Tensor:
    x, y = rank_batch(rank, step)
    return nn.functional.mse_loss(model(x), y)


def snapshot(tensors: Any) -> list[torch.Tensor]:
    return [t.detach().clone() for t in tensors]


def train(accelerator: Accelerator, enabled: bool) -> dict[str, Any]:
    """STEPS steps of SGD on this rank's data inside LocalSGD."""
    model = initial_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    model, optimizer = accelerator.prepare(model, optimizer)
    inner = accelerator.unwrap_model(model)
    rank = accelerator.process_index
    record: dict[str, Any] = {"grads": [], "local": [], "after": []}
    with LocalSGD(accelerator, model, LOCAL_SGD_STEPS, enabled=enabled) as local_sgd:
        record["enabled"] = local_sgd.enabled
        for step in range(STEPS):
            accelerator.backward(loss_of(model, rank, step))
            record["grads"].append(snapshot(p.grad for p in inner.parameters()))
            optimizer.step()
            optimizer.zero_grad()
            record["local"].append(snapshot(inner.parameters()))
            local_sgd.step()
            record["after"].append(snapshot(inner.parameters()))
    record["final"] = snapshot(inner.parameters())
    record["num_steps"] = local_sgd.num_steps
    return record


def run() -> dict[str, Any]:
    """Both runs on this rank: LocalSGD on, then off (DDP synchronises every step)."""
    accelerator = Accelerator()
    return {
        "distributed_type": str(accelerator.distributed_type),
        "rank": accelerator.process_index,
        "on": train(accelerator, enabled=True),
        "off": train(accelerator, enabled=False),
    }
