"""Rank-side code of the stateful resume test: a run with use_stateful_dataloader=True trained
whole, stopped mid-epoch right after save_state, or resumed in a fresh launch by load_state."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from nbaccel import Accelerator, DataLoaderConfiguration, set_seed

EPOCHS = 3
STOP = (1, 2)  # save_state after 2 batches of epoch 1, then the launch ends
SAMPLES = 45  # 12 batches of 4, the last one short: the last round is completed by padding


class Numbered(Dataset):
    """Sample ``i`` is (features, i): every batch says which samples it holds."""

    def __init__(self, n: int) -> None:
        generator = torch.Generator().manual_seed(3)
        self.features = torch.randn(n, 4, generator=generator)

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.features[index], index


def build(seed: int, num_workers: int, dispatch: bool) -> tuple[Accelerator, Any, Any, Any]:
    config = DataLoaderConfiguration(use_stateful_dataloader=True, dispatch_batches=dispatch)
    acc = Accelerator(dataloader_config=config)
    set_seed(seed, device_specific=True)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.3), nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(Numbered(SAMPLES), batch_size=4, shuffle=True, num_workers=num_workers)
    model, optimizer, loader = acc.prepare(model, optimizer, loader)
    return acc, model, optimizer, loader


def run(mode: str, directory: str, num_workers: int, dispatch: bool) -> dict[str, Any]:
    """``"full"``: EPOCHS epochs; ``"first"``: stop at STOP after ``save_state``;
    ``"resume"``: a fresh launch (another seed: everything comes from the checkpoint) that
    loads it and finishes. Returns the samples of every batch this rank trained on, the
    final weights and, for ``"first"``, the loader's state when it was saved."""
    acc, model, optimizer, loader = build(7 if mode == "resume" else 42, num_workers, dispatch)
    start = 0
    if mode == "resume":
        acc.load_state(directory)
        start = loader.epoch  # the epoch the saved position is in
    seen: list[list[int]] = []
    for epoch in range(start, EPOCHS):
        for step, (x, index) in enumerate(loader, start=1):
            seen.append(index.tolist())
            model.train()
            loss = (model(x) ** 2).mean()
            acc.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            if mode == "first" and (epoch, step) == STOP:
                acc.save_state(directory)
                return {"seen": seen, "state": loader.state_dict()}
    weights = {k: v.clone() for k, v in acc.get_state_dict(model).items()}
    return {"seen": seen, "weights": weights}
