"""What the machines' cells launch on the two-machine bed (imported inside each kernel)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from nbaccel import PartialState


def _summed(value: float) -> float:
    tensor = torch.tensor([value])
    dist.all_reduce(tensor)  # crosses the link: two ranks on each machine
    return float(tensor.item())


def tour(scale: float) -> dict[str, Any]:
    """The quick tour's function: every rank adds its part; returns what it saw."""
    state = PartialState()
    total = _summed(scale * state.process_index)
    print(f"rank {state.process_index} of world {state.num_processes}: sum {total}")
    return {
        "rank": state.process_index,
        "local_rank": state.local_process_index,
        "world": state.num_processes,
        "sum": total,
        "pid": os.getpid(),
    }


def hold(flags: str) -> int:
    """Meet, then wait (up to 60 s) until the test creates ``flags/release``."""
    state = PartialState()
    _summed(1.0)
    Path(flags, f"holding{state.process_index}").touch()
    deadline = time.monotonic() + 60
    while not Path(flags, "release").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    state.wait_for_everyone()
    return state.process_index


def raise_on(rank: int) -> int:
    """Rank ``rank`` raises after the first collective; the others wait in the next one."""
    state = PartialState()
    _summed(1.0)
    if state.process_index == rank:
        raise ValueError(f"bad batch on rank {rank}")
    _summed(1.0)
    return state.process_index


def until_cut(flags: str) -> dict[str, int]:
    """Attempt 0 sums for ever (the test pulls the cable); a later attempt sums once and
    returns."""
    state = PartialState()
    total = _summed(1.0)
    if state.restart_count == 0:
        Path(flags, f"running{state.process_index}").touch()
        while True:
            _summed(1.0)
            time.sleep(0.05)
    return {"rank": state.process_index, "attempt": state.restart_count, "sum": int(total)}


def save_sharded(disk: str) -> dict[str, Any]:
    """Train a step of an FSDP model and save a sharded checkpoint on this machine's disk."""
    from tests.support import fsdp_checkpoints as fsdp

    acc, model, optimizer = fsdp.build(2, "SHARDED_STATE_DICT")
    fsdp.train_step(acc, model, optimizer, fsdp.batches(1, acc.num_processes)[0])
    full = {k: v.clone() for k, v in acc.get_state_dict(model).items()}
    acc.save_state(os.path.join(disk, "sharded"))
    torch.save(full, os.path.join(disk, f"expected{acc.process_index}.pt"))
    return {"rank": acc.process_index}


def stall_on(rank: int) -> int:
    """Every rank but ``rank`` enters an all_reduce; ``rank`` sleeps (up to 60 s) instead."""
    state = PartialState()
    _summed(1.0)
    if state.process_index == rank:
        time.sleep(60)  # <- stalls
    _summed(1.0)
    return state.process_index


def deepspeed_zero3() -> dict[str, Any]:
    """ZeRO-3 through the Accelerator over both machines (4 ranks): a few AdamW steps on 4
    samples per rank; rank 0 returns the gathered weights as lists."""
    from nbaccel import Accelerator
    from nbaccel.utils import DeepSpeedPlugin

    acc = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=3))
    data, model = deepspeed_problem()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    engine, optimizer, loader = acc.prepare(model, optimizer, loader)
    for x, y in loader:
        acc.backward(torch.nn.functional.mse_loss(engine(x), y))
        optimizer.step()
        optimizer.zero_grad()
    weights = acc.get_state_dict(engine)
    return {
        "rank": acc.process_index,
        "world": acc.num_processes,
        "stage": engine.zero_optimization_stage(),
        "weights": {k: v.tolist() for k, v in weights.items()},
    }


def deepspeed_problem() -> tuple[torch.utils.data.TensorDataset, torch.nn.Module]:
    """The data and the model of :func:`deepspeed_zero3` (the test's reference uses them)."""
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(
        torch.randn(64, 8, generator=g), torch.randn(64, 1, generator=g)
    )
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    return data, model
