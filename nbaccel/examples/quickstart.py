"""The quickstart's training function (an MLP on scikit-learn's digits), run by ``nbaccel demo``."""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ..accelerator import Accelerator
from ..seeding import set_seed

__all__ = ["load_digits_tensors", "make_model", "require_scikit_learn", "train"]

_MISSING_SKLEARN = (
    "The examples train on the handwritten digits that scikit-learn ships, but scikit-learn "
    'is not installed. Install it with: pip install "nbaccel[examples]" '
    "(or pip install scikit-learn)."
)


def import_extra(name: str, missing: str) -> Any:
    """Import the optional package ``name`` (an extra of the examples); when it is not
    installed, raise a ``ModuleNotFoundError`` whose message, ``missing``, says how to install it.
    """
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(missing, name=name) from exc


def require_scikit_learn() -> None:
    """Raise a ``ModuleNotFoundError`` that says how to install scikit-learn when it is missing."""
    import_extra("sklearn", _MISSING_SKLEARN)


def evaluate(accelerator: Accelerator, model: nn.Module, test_loader: Any) -> dict[str, Any]:
    """The prepared ``model``'s accuracy on the prepared ``test_loader`` (gathered from every
    process), the number of samples evaluated and a CPU copy of the unwrapped weights."""
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in test_loader:
            predicted, expected = accelerator.gather_for_metrics((model(x).argmax(dim=1), y))
            correct += int((predicted == expected).sum())
            total += len(expected)
    weights = accelerator.unwrap_model(model).state_dict()
    return {
        "accuracy": correct / total,
        "evaluated": total,
        "state_dict": {k: v.detach().cpu().clone() for k, v in weights.items()},
    }


def load_digits_tensors(
    test_size: int = 389, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """scikit-learn's digits as ``(x_train, y_train, x_test, y_test)``, pixels scaled to [0, 1].

    The split is a fixed permutation drawn from ``seed``: the same on every rank and every run.

    Raises:
        ModuleNotFoundError: scikit-learn is missing (the message says how to install it).
    """
    require_scikit_learn()
    # scikit-learn is optional (the examples extra)
    from sklearn.datasets import load_digits

    digits = load_digits()
    inputs = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    test, train = order[:test_size], order[test_size:]
    return inputs[train], labels[train], inputs[test], labels[test]


def make_model(hidden: int = 128, seed: int = 0) -> nn.Module:
    """A two-layer MLP for 8x8 images (64 inputs, 10 classes) with deterministic weights."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def train(
    epochs: int = 8,
    batch_size: int = 32,
    lr: float = 2e-3,
    seed: int = 0,
    mixed_precision: str | None = None,
    gradient_accumulation_steps: int = 1,
    verbose: bool = True,
) -> dict[str, Any]:
    """Train on this rank's share of the digits; return its metrics and the final weights.

    ``nbaccel demo`` and ``notebooks/01_quickstart.ipynb`` run exactly this function. The digits
    (1,797 images of 8x8 pixels, 10 classes) ship inside scikit-learn, so nothing is
    downloaded. The model, the optimizer and both loaders go through ``prepare()``, the loss
    through ``backward()`` inside ``accumulate()``, and every rank computes the test accuracy
    on the whole test split from ``gather_for_metrics``.

    Args:
        epochs: passes over the 1,408 training images.
        batch_size: images per process per step.
        lr: Adam learning rate.
        seed: seed of the split, the initial weights and the shuffle.
        mixed_precision: passed to ``Accelerator`` (``None``: the launcher's choice).
        gradient_accumulation_steps: batches per optimizer step.
        verbose: print the loss after each epoch (main process) and each rank's share.

    Returns:
        ``rank``, ``world_size``, ``device``, ``steps`` (optimizer steps), ``last_loss``,
        ``accuracy`` and ``evaluated`` (on the whole test split, gathered from every rank),
        ``state_dict`` (the final weights, on the CPU).
    """
    accelerator = Accelerator(
        mixed_precision=mixed_precision, gradient_accumulation_steps=gradient_accumulation_steps
    )
    set_seed(seed)
    x_train, y_train, x_test, y_test = load_digits_tensors(seed=seed)
    model = make_model(seed=seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    train_loader = DataLoader(TensorDataset(x_train, y_train), batch_size=batch_size, shuffle=True)
    test_loader = DataLoader(TensorDataset(x_test, y_test), batch_size=batch_size)
    model, optimizer, train_loader, test_loader = accelerator.prepare(
        model, optimizer, train_loader, test_loader
    )
    steps, seen, last_loss = 0, 0, float("nan")
    for epoch in range(epochs):
        model.train()
        for x, y in train_loader:
            seen += len(y)
            with accelerator.accumulate(model):
                loss = nn.functional.cross_entropy(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            steps += int(accelerator.sync_gradients)
            last_loss = float(loss.detach())
        if verbose:
            accelerator.print(f"epoch {epoch + 1}/{epochs}: loss {last_loss:.4f}")
    if verbose:
        print(f"trained on {seen} images in {steps} optimizer steps")
    return {
        "rank": accelerator.process_index,
        "world_size": accelerator.num_processes,
        "device": str(accelerator.device),
        "steps": steps,
        "last_loss": last_loss,
        **evaluate(accelerator, model, test_loader),
    }
