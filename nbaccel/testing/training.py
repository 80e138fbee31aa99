"""A small, real training function: the demo's job and the equivalence tests' subject.

It trains an MLP classifier on a synthetic, well-separated data set with plain
``DistributedDataParallel`` on whatever process group ``PartialState`` set up. Each global
step takes the next ``batch_size * num_processes`` samples and gives rank ``r`` the ``r``-th
slice, so N ranks with batch b follow exactly the same path as one rank with batch N*b.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..state import PartialState

__all__ = ["make_dataset", "make_model", "train_classifier"]


def make_dataset(
    samples: int = 2048, features: int = 32, classes: int = 4, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian clusters, one per class: inputs ``(samples, features)`` and integer labels."""
    gen = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, features, generator=gen) * 3.0
    labels = torch.randint(0, classes, (samples,), generator=gen)
    inputs = centers[labels] + torch.randn(samples, features, generator=gen)
    return inputs, labels


def make_model(features: int = 32, classes: int = 4, hidden: int = 64, seed: int = 0) -> nn.Module:
    """A two-layer MLP with deterministic initial weights."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))


def _global_sum(value: torch.Tensor, distributed: bool) -> torch.Tensor:
    if distributed:
        dist.all_reduce(value)
    return value


def train_classifier(
    epochs: int = 3, batch_size: int = 32, lr: float = 0.1, seed: int = 0
) -> dict[str, Any]:
    """Train on this rank's share of every global batch; return metrics and final weights.

    Args:
        epochs: passes over the training split.
        batch_size: samples per rank per step.
        lr: SGD learning rate.
        seed: seed of the data set and of the initial weights.
    """
    state = PartialState()
    world, rank = state.num_processes, state.process_index
    inputs, labels = make_dataset(seed=seed)
    train_x, train_y, test_x, test_y = inputs[:1536], labels[:1536], inputs[1536:], labels[1536:]
    model = make_model(seed=seed)
    wrapped: nn.Module = DistributedDataParallel(model) if state.use_distributed else model
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=lr)
    step_size = batch_size * world
    steps, last_loss = 0, float("nan")
    for _ in range(epochs):
        for start in range(0, len(train_x) - step_size + 1, step_size):
            mine = slice(start + rank * batch_size, start + (rank + 1) * batch_size)
            loss = nn.functional.cross_entropy(wrapped(train_x[mine]), train_y[mine])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps, last_loss = steps + 1, float(loss.detach())
    with torch.no_grad():
        shard = slice(rank * len(test_x) // world, (rank + 1) * len(test_x) // world)
        predicted = model(test_x[shard]).argmax(dim=1)
        counts = torch.tensor([(predicted == test_y[shard]).sum().item(), len(predicted)])
        correct, total = _global_sum(counts, state.use_distributed).tolist()
    return {
        "rank": rank,
        "world_size": world,
        "steps": steps,
        "last_loss": last_loss,
        "accuracy": correct / total,
        "state_dict": {k: v.detach().clone() for k, v in model.state_dict().items()},
    }
