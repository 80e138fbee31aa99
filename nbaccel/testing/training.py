"""A small, real training function: the demo's job and the equivalence tests' subject.

It trains an MLP classifier on a synthetic data set with the Accelerator: the model, the
optimizer and a shuffling data loader go through ``prepare()``, the loss through
``backward()``, and the test accuracy comes from ``gather_for_metrics``. With N processes and
batch b per process it follows exactly the path of one process with batch N*b (the shuffle is
seeded the same way and each global batch is split between the ranks).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ..accelerator import Accelerator
from ..examples.quickstart import evaluate
from ..seeding import set_seed

__all__ = ["make_dataset", "make_model", "train_classifier"]


def make_dataset(
    samples: int = 2048, features: int = 32, classes: int = 4, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian clusters, one per class: inputs ``(samples, features)`` and integer labels."""
    gen = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, features, generator=gen) * 0.6
    labels = torch.randint(0, classes, (samples,), generator=gen)
    inputs = centers[labels] + torch.randn(samples, features, generator=gen)
    return inputs, labels


def make_model(features: int = 32, classes: int = 4, hidden: int = 64, seed: int = 0) -> nn.Module:
    """A two-layer MLP with deterministic initial weights."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))


def train_classifier(
    epochs: int = 3,
    batch_size: int = 32,
    lr: float = 0.1,
    seed: int = 0,
    mixed_precision: str | None = None,
) -> dict[str, Any]:
    """Train on this rank's share of every global batch; return metrics and final weights.

    Args:
        epochs: passes over the training split.
        batch_size: samples per process per step.
        lr: SGD learning rate.
        seed: seed of the data set, the initial weights and the shuffle.
        mixed_precision: passed to ``Accelerator`` (None: the launcher's choice).
    """
    accelerator = Accelerator(mixed_precision=mixed_precision)
    set_seed(seed)
    inputs, labels = make_dataset(seed=seed)
    train = TensorDataset(inputs[:1536], labels[:1536])
    test = TensorDataset(inputs[1536:], labels[1536:])
    model = make_model(seed=seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    train_loader = DataLoader(train, batch_size=batch_size, shuffle=True)
    test_loader = DataLoader(test, batch_size=batch_size)
    model, optimizer, train_loader, test_loader = accelerator.prepare(
        model, optimizer, train_loader, test_loader
    )
    steps, last_loss = 0, float("nan")
    for _ in range(epochs):
        model.train()
        for x, y in train_loader:
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
            steps, last_loss = steps + 1, float(loss.detach())
    return {
        "rank": accelerator.process_index,
        "world_size": accelerator.num_processes,
        "steps": steps,
        "last_loss": last_loss,
        **evaluate(accelerator, model, test_loader),
    }
