"""Rank-side code for the checkpoint tests: round trips, exact resume and the held save; and
``save_per_node``, which the multiprocess tier runs on two node groups over loopback and the
multinode tier on two machines."""

from __future__ import annotations

import os
import random
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from nbaccel import (
    Accelerator,
    DataLoaderConfiguration,
    GradScalerKwargs,
    PartialState,
    ProjectConfiguration,
    set_seed,
    skip_first_batches,
)
from nbaccel.testing import reset_state


class Progress:
    """A registered object: where training stands (epoch, batches done in it)."""

    def __init__(self) -> None:
        self.epoch = 0
        self.in_epoch = 0
        self.history = torch.zeros(3)

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "in_epoch": self.in_epoch, "history": self.history}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = state["epoch"]
        self.in_epoch = state["in_epoch"]
        self.history = state["history"]


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 1))


def make_data(n: int = 64) -> TensorDataset:
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(n, 6, generator=gen)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


def build(
    seed: int, stateful: bool = False, fp16: bool = False, **kwargs: Any
) -> tuple[Accelerator, nn.Module, Any, Any, Any, Progress]:
    """An Accelerator with a prepared model, AdamW, scheduler, shuffled loader and Progress."""
    handlers = [GradScalerKwargs(init_scale=1024.0, growth_interval=1)] if fp16 else None
    acc = Accelerator(
        mixed_precision="fp16" if fp16 else None,
        kwargs_handlers=handlers,
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=stateful),
        **kwargs,
    )
    set_seed(seed, device_specific=True)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1 + s))
    loader = DataLoader(make_data(), batch_size=4, shuffle=True)
    model, optimizer, scheduler, loader = acc.prepare(model, optimizer, scheduler, loader)
    progress = Progress()
    acc.register_for_checkpointing(progress)
    return acc, model, optimizer, scheduler, loader, progress


def train_step(
    acc: Accelerator, model: nn.Module, optimizer: Any, scheduler: Any, batch: Any
) -> None:
    x, y = batch
    with acc.autocast():
        loss = ((model(x) - y) ** 2).mean()
    acc.backward(loss)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()


def draws() -> tuple[list[float], float, float]:
    return torch.rand(3).tolist(), random.random(), float(np.random.rand())


def same(a: Any, b: Any) -> bool:
    """Deep, bitwise equality of nested containers of tensors and plain values."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def flat(batches: list[Any]) -> list[float]:
    return [float(v) for batch in batches for v in batch[0][:, 0]]


def round_trip(directory: str, stateful: bool, fp16: bool) -> None:
    """Train a little, save mid-epoch, load into objects built with another seed, compare."""
    acc, model, optimizer, scheduler, loader, progress = build(0, stateful, fp16)
    iterator = iter(loader)
    for _ in range(3):
        train_step(acc, model, optimizer, scheduler, next(iterator))
    progress.epoch, progress.in_epoch, progress.history = 0, 3, torch.arange(3.0)
    acc.step = 5
    path = acc.save_state(directory)
    expected = {
        "model": {k: v.clone() for k, v in acc.get_state_dict(model).items()},
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": acc.scaler.state_dict() if acc.scaler is not None else None,
        "progress": progress.state_dict(),
        "loader": loader.state_dict(),
    }
    rest = [batch for batch in iterator]  # iterating draws no random numbers
    after = draws()

    acc2, model2, optimizer2, scheduler2, loader2, progress2 = build(99, stateful, fp16)
    assert not same(acc2.get_state_dict(model2), expected["model"])
    acc2.load_state(path)
    assert same(acc2.get_state_dict(model2), expected["model"]), "model"
    assert same(optimizer2.state_dict(), expected["optimizer"]), "optimizer"
    assert same(scheduler2.state_dict(), expected["scheduler"]), "scheduler"
    assert scheduler2.get_last_lr() == scheduler.get_last_lr()
    if fp16 and acc.device.type == "cpu":  # fp16 trains in fp32 there: no scaler to save
        assert acc.scaler is None and acc2.scaler is None
    elif fp16:
        assert expected["scaler"]["scale"] > 1024.0, expected["scaler"]
        assert same(acc2.scaler.state_dict(), expected["scaler"]), "scaler"
    assert same(progress2.state_dict(), expected["progress"]), "registered object"
    assert acc2.step == 5
    assert draws() == after, "random number generators"
    state = loader2.state_dict()
    assert (state["epoch"], state["seed"]) == (0, expected["loader"]["seed"]), state
    resumed = list(loader2) if stateful else list(skip_first_batches(loader2, 3))
    assert flat(resumed) == flat(rest), "the batches left in the epoch"


def held_save(project: str, hold_dir: str) -> None:
    """Load the newest checkpoint, then start a save that a pre-save hook holds forever."""
    acc, model, *_ = build(1, project_config=auto(project))
    acc.load_state()

    def hold(models: list[nn.Module], weights: list[dict[str, torch.Tensor]], out: str) -> None:
        rank = PartialState().process_index
        (Path(out) / "model.safetensors").write_bytes(b"half a checkpoint")
        (Path(hold_dir) / f"{rank}.pid").write_text(str(os.getpid()))
        time.sleep(120)

    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1.0)
    acc.register_save_state_pre_hook(hold)
    acc.save_state()


def auto(project: str) -> ProjectConfiguration:
    return ProjectConfiguration(project_dir=project, automatic_checkpoint_naming=True)


def save_numbered(project: str) -> dict[str, torch.Tensor]:
    """Save an automatically named checkpoint; returns the weights saved."""
    acc, model, *_ = build(1, project_config=auto(project))
    if Path(project, "checkpoints").is_dir():
        acc.load_state()
    acc.save_state()
    return {k: v.clone() for k, v in acc.get_state_dict(model).items()}


def load_newest(project: str) -> tuple[dict[str, torch.Tensor], int]:
    """Load the newest checkpoint; returns its weights and the next checkpoint number."""
    acc, model, *_ = build(5, project_config=auto(project))
    acc.load_state()
    return {k: v.clone() for k, v in acc.get_state_dict(model).items()}, acc.save_iteration


EPOCHS = 3
STOP = (1, 3)  # stop after 3 batches of epoch 1


def exact_resume(mode: str, directory: str, stateful: bool) -> dict[str, torch.Tensor] | None:
    """Train EPOCHS epochs ("full"), or stop at STOP after save_state ("first"), or load and
    finish ("resume"). Returns the final weights (None after "first")."""
    acc, model, optimizer, scheduler, loader, progress = build(42, stateful)
    start_epoch, skip = 0, 0
    if mode == "resume":
        acc.load_state(directory)
        start_epoch, skip = progress.epoch, progress.in_epoch
    for epoch in range(start_epoch, EPOCHS):
        active = loader
        if epoch == start_epoch and skip and not stateful:
            active = skip_first_batches(loader, skip)
        for i, batch in enumerate(active, start=skip if epoch == start_epoch else 0):
            model.train()
            train_step(acc, model, optimizer, scheduler, batch)
            progress.epoch, progress.in_epoch = epoch, i + 1
            if mode == "first" and (epoch, i + 1) == STOP:
                acc.save_state(directory)
                return None
        progress.epoch, progress.in_epoch = epoch + 1, 0
    return {k: v.clone() for k, v in acc.get_state_dict(model).items()}


def exports(base: str) -> None:
    """save_model and save write from one process; every process can load the export."""
    acc, model, *_ = build(3)
    rank = acc.process_index
    acc.save_model(model, f"{base}/export_{rank}", max_shard_size=300)
    acc.save({"rank": rank}, f"{base}/saved_{rank}.pt")
    acc.wait_for_everyone()
    assert os.path.isdir(f"{base}/export_0") and os.path.isfile(f"{base}/saved_0.pt")
    assert not os.path.exists(f"{base}/export_1") and not os.path.exists(f"{base}/saved_1.pt")
    from nbaccel import load_checkpoint_in_model

    fresh = make_model()
    load_checkpoint_in_model(fresh, f"{base}/export_0", device_map={"": acc.device}, strict=True)
    assert same(fresh.state_dict(), acc.get_state_dict(model))


def run_checks(base: str, checks: list[tuple[str, Callable[[], None]]]) -> dict[str, str]:
    """Run each check on this rank; "ok" or the traceback, by name."""
    results = {}
    for name, check in checks:
        try:
            check()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc()
        PartialState().wait_for_everyone()
    return results


def fp16_round_trip(directory: str) -> None:
    """The round trip with the fp16 GradScaler (the precision is set once per state)."""
    reset_state()
    round_trip(directory, stateful=False, fp16=True)


def all_round_trips(base: str) -> dict[str, str]:
    """Every round trip, each into its own directory."""
    checks: list[tuple[str, Callable[[], None]]] = [
        ("plain", lambda: round_trip(f"{base}/plain", stateful=False, fp16=False)),
        ("stateful", lambda: round_trip(f"{base}/stateful", stateful=True, fp16=False)),
        ("exports", lambda: exports(base)),
        ("fp16", lambda: fp16_round_trip(f"{base}/fp16")),
    ]
    return run_checks(base, checks)


def _cloned(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _cloned(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cloned(v) for v in value)
    return value


def save_per_node(node_dir: str) -> dict[str, Any]:
    """One rank of a 2-node run whose machines share no file system: ``node_dir`` is its own
    node's directory. Save with save_on_each_node into ``node_dir/each``, move on a step,
    load it back from there and compare; then save without it into ``node_dir/main_only``."""
    state = PartialState()
    acc, model, optimizer, scheduler, loader, progress = build(0)
    batches = iter(loader)
    for _ in range(2):
        train_step(acc, model, optimizer, scheduler, next(batches))
    progress.epoch, progress.in_epoch = 0, 2
    acc.project_configuration.save_on_each_node = True
    each = acc.save_state(os.path.join(node_dir, "each"))
    expected = _cloned(
        {
            "model": acc.get_state_dict(model),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "progress": progress.state_dict(),
        }
    )
    after = draws()
    train_step(acc, model, optimizer, scheduler, next(batches))  # move away from the save
    progress.epoch, progress.in_epoch = 5, 5
    acc.load_state(each)  # from this node's directory only
    loaded = {
        "model": acc.get_state_dict(model),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "progress": progress.state_dict(),
    }
    failed = [name for name in expected if not same(loaded[name], expected[name])]
    if draws() != after:
        failed.append("random states")
    acc.project_configuration.save_on_each_node = False
    acc.save_state(os.path.join(node_dir, "main_only"))
    return {"rank": state.process_index, "local_rank": state.local_process_index, "failed": failed}
