"""Every checkpoint writer, run once in this process (``python durability_target.py OUT``) so
that a test can trace its system calls: save_state with each kind of object (model,
optimizer, scheduler, data loader sampler, registered object, RNG), a save over an existing
checkpoint, Accelerator.save, save_model in shards, a sharded FSDP2 checkpoint (DCP) and its
merged weights. Prints one JSON line: the checkpoint directories (published by a rename) and
the files written in place."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from fault_helpers import Progress
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.support.process_group import single_process_job


def plain(out: Path) -> dict[str, list[str]]:
    from nbaccel import Accelerator

    acc = Accelerator(cpu=True)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    data = TensorDataset(torch.randn(32, 16), torch.randn(32, 4))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model, optimizer, loader, scheduler = acc.prepare(model, optimizer, loader, scheduler)
    acc.register_for_checkpointing(Progress())
    for x, y in loader:
        acc.backward(nn.functional.mse_loss(model(x), y))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    first = acc.save_state(out / "state")
    again = acc.save_state(out / "state")  # replaces the first one (the exchange path)
    acc.save_state(out / "pickled", safe_serialization=False)
    acc.save({"step": torch.tensor(1)}, out / "extra.pt")
    acc.save(acc.get_state_dict(model), out / "weights.safetensors", True)
    acc.save_model(model, out / "export", max_shard_size=1000)  # several shards and an index
    return {
        "published": [first, again, str(out / "pickled")],
        "in_place": [str(out / "extra.pt"), str(out / "weights.safetensors"), str(out / "export")],
    }


def sharded(out: Path) -> dict[str, list[str]]:
    """FSDP2 in a process group of one, set up as torchrun would."""
    from nbaccel import Accelerator
    from nbaccel.fsdp import FullyShardedDataParallelPlugin
    from nbaccel.utils import merge_fsdp_weights

    single_process_job()
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, state_dict_type="SHARDED_STATE_DICT")
    acc = Accelerator(cpu=True, fsdp_plugin=plugin)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = acc.prepare(model, optimizer)
    acc.backward(model(torch.randn(4, 16)).sum())
    optimizer.step()
    acc.save_state(out / "fsdp")
    merge_fsdp_weights(out / "fsdp" / "pytorch_model_fsdp_0", out / "merged")
    acc.end_training()
    return {"published": [str(out / "fsdp")], "in_place": [str(out / "merged")]}


def main(out: Path) -> None:
    from nbaccel.testing import reset_state

    found: dict[str, Any] = plain(out)
    reset_state()  # the launch below sets up its own
    for key, paths in sharded(out).items():
        found[key] += paths
    print(json.dumps(found))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
