"""The GPU tier's checks, each run in a fresh interpreter (``python gpu_checks.py NAME``) so
that each has its own CUDA context and the test process never initialises CUDA. Each prints
one JSON line with what it measured; tests/gpu/test_gpu.py asserts on it."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tests.support.process_group import single_process_job

CHECKS: dict[str, Callable[[], dict[str, Any]]] = {}


def check(function: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    CHECKS[function.__name__] = function
    return function


def _data(seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(32, 4, generator=generator)
    batches = []
    for _ in range(40):
        x = torch.randn(64, 32, generator=generator)
        batches.append((x, x @ weight))
    return batches


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(),
                         nn.Linear(128, 4))  # fmt: skip


def _fit(acc: Any, model: nn.Module, optimizer: Any) -> list[float]:
    """One pass over :func:`_data`; the loss of every step."""
    losses = []
    for x, y in _data():
        loss = nn.functional.mse_loss(model(x.to(acc.device)).float(), y.to(acc.device))
        acc.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


@check
def partial_state() -> dict[str, Any]:
    import torch.distributed as dist

    from nbaccel import PartialState
    from nbaccel.environment import LaunchEnvironment, choose_device

    state = PartialState()
    launched = choose_device(LaunchEnvironment(rank=0, world_size=2, local_world_size=2))
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    total = torch.ones(4, device="cuda:0")
    dist.all_reduce(total)
    dist.destroy_process_group()
    return {
        "device": str(state.device),
        "backend": state.backend,
        "launched_device": str(launched.device),
        "launched_backend": launched.backend,
        "nccl_all_reduce": total.tolist(),
    }


def _train(precision: str) -> dict[str, Any]:
    from nbaccel import Accelerator
    from nbaccel.testing import reset_state

    reset_state()
    acc = Accelerator(mixed_precision=precision)
    model = acc.prepare(_model())
    optimizer = acc.prepare(torch.optim.AdamW(model.parameters(), lr=1e-2))
    losses = _fit(acc, model, optimizer)
    result: dict[str, Any] = {
        "device": str(acc.device),
        "losses": losses,
        "weights": [p.detach().float().cpu().flatten()[:64].tolist() for p in model.parameters()],
        "scaler": type(acc.scaler).__name__ if acc.scaler is not None else None,
    }
    if precision == "fp16":
        before = [p.detach().clone() for p in model.parameters()]
        scale = acc.scaler.get_scale()
        x, y = _data()[0]
        loss = nn.functional.mse_loss(model(x.to(acc.device)).float(), y.to(acc.device))
        acc.backward(loss * float("inf"))  # every gradient overflows
        optimizer.step()
        optimizer.zero_grad()
        result["skipped"] = acc.optimizer_step_was_skipped
        after = list(model.parameters())
        result["unchanged"] = all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
        result["scale_before"], result["scale_after"] = scale, acc.scaler.get_scale()
    return result


@check
def mixed_precision() -> dict[str, Any]:
    return {name: _train(name) for name in ("no", "bf16", "fp16")}


def _fsdp(offload: bool) -> dict[str, Any]:
    from nbaccel import Accelerator
    from nbaccel.fsdp import FullyShardedDataParallelPlugin
    from nbaccel.testing import reset_state

    reset_state()
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        mixed_precision_policy={"param_dtype": "bf16", "reduce_dtype": "fp32"},
        cpu_offload=offload,
    )
    acc = Accelerator(fsdp_plugin=plugin)
    model = _model()
    seen: list[torch.dtype] = []
    model[1].register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    model = acc.prepare(model)
    optimizer = acc.prepare(torch.optim.AdamW(model.parameters(), lr=1e-2))
    losses = _fit(acc, model, optimizer)
    parameter = next(model.parameters())
    return {
        "device": str(acc.device),
        "losses": losses,
        "compute_dtype": str(seen[-1]),
        "parameter_type": type(parameter).__name__,
        "parameter_device": str(parameter.device),
        "parameter_dtype": str(parameter.dtype),
    }


@check
def fsdp2() -> dict[str, Any]:
    single_process_job()
    return {"gpu": _fsdp(offload=False), "offload": _fsdp(offload=True)}


def _steps(acc: Any, model: nn.Module, optimizer: Any, batches: list[Any]) -> list[float]:
    losses = []
    for x, y in batches:
        loss = nn.functional.mse_loss(model(x.to(acc.device)), y.to(acc.device))
        acc.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


@check
def checkpoint() -> dict[str, Any]:
    """save_state after 3 steps; 3 more steps; load_state; the same 3 steps again: the losses
    must repeat bit for bit (deterministic cuBLAS for the check)."""
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # before the first cuBLAS handle
    torch.use_deterministic_algorithms(True)
    from nbaccel import Accelerator

    acc = Accelerator()
    model = acc.prepare(_model())
    optimizer = acc.prepare(torch.optim.AdamW(model.parameters(), lr=1e-2))
    data = _data()
    _steps(acc, model, optimizer, data[:3])
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    moments = [s["exp_avg"].clone() for s in optimizer.state_dict()["state"].values()]
    with tempfile.TemporaryDirectory() as directory:
        acc.save_state(Path(directory) / "ck")
        uninterrupted = _steps(acc, model, optimizer, data[3:6])
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
        acc.load_state(Path(directory) / "ck")
        state = list(optimizer.state_dict()["state"].values())
        restored = {
            "weights_equal": all(torch.equal(v, saved[k]) for k, v in model.state_dict().items()),
            "weights_devices": sorted({str(v.device) for v in model.state_dict().values()}),
            "moments_equal": all(
                torch.equal(s["exp_avg"], m) for s, m in zip(state, moments, strict=True)
            ),
            "moments_devices": sorted({str(s["exp_avg"].device) for s in state}),
        }
        resumed = _steps(acc, model, optimizer, data[3:6])
    return {**restored, "uninterrupted_losses": uninterrupted, "resumed_losses": resumed}


@check
def banner() -> dict[str, Any]:
    from nbaccel.launch.config import LaunchConfig
    from nbaccel.launch.parent.banner import banner as launch_banner

    text = launch_banner(LaunchConfig.build(num_processes=1), "spawn")
    return {"banner": text, "name": torch.cuda.get_device_name(0)}


@check
def free_memory() -> dict[str, Any]:
    """Objects that only the Accelerator still holds (as in a batch-size search, where the
    training function has returned) go back to the driver on ``free_memory()``; and
    ``a, b = free_memory(a, b)`` gives back Nones, after which the memory is free in torch's
    cache. Figures are bytes above a baseline taken once cuBLAS has its workspaces."""
    from nbaccel import Accelerator

    acc = Accelerator()
    warm = nn.Linear(4096, 4096).to(acc.device)  # cuBLAS and cuBLASLt take their workspaces,
    warm(torch.randn(8, 4096, device=acc.device)).sum().backward()  # kept for the process
    del warm
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    baseline = torch.cuda.memory_allocated()

    def train_once() -> int:
        model = acc.prepare(nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(4)]))
        optimizer = acc.prepare(torch.optim.AdamW(model.parameters()))
        acc.backward(model(torch.randn(8, 4096, device=acc.device)).sum())
        optimizer.step()
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated() - baseline

    used = train_once()
    held = torch.cuda.memory_allocated() - baseline  # the Accelerator's references keep it
    reserved = torch.cuda.memory_reserved()
    free_before = torch.cuda.mem_get_info()[0]  # what the driver says is free on the device
    acc.free_memory()
    result: dict[str, Any] = {
        "used": used,
        "held": held,
        "after": torch.cuda.memory_allocated() - baseline,
        "reserved_before": reserved,
        "reserved_after": torch.cuda.memory_reserved(),
        "driver_free_before": free_before,
        "driver_free_after": torch.cuda.mem_get_info()[0],
    }
    model = acc.prepare(nn.Linear(4096, 4096))
    optimizer = acc.prepare(torch.optim.AdamW(model.parameters()))
    model, optimizer = acc.free_memory(model, optimizer)
    result["returned"] = [model, optimizer]
    result["after_returned"] = torch.cuda.memory_allocated() - baseline
    return result


def _ddp_rank(batches: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, Any]:
    """In each launched rank: its half of every batch, gradients averaged by DDP."""
    from nbaccel import Accelerator

    acc = Accelerator()
    model = acc.prepare(_model())
    optimizer = acc.prepare(torch.optim.SGD(model.parameters(), lr=0.05))
    for x, y in batches:
        half = x.shape[0] // acc.num_processes
        mine = slice(acc.process_index * half, (acc.process_index + 1) * half)
        loss = nn.functional.mse_loss(model(x[mine].to(acc.device)), y[mine].to(acc.device))
        acc.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    weights = [p.detach().cpu().flatten().tolist() for p in acc.unwrap_model(model).parameters()]
    return {"device": str(acc.device), "backend": acc.state.backend, "weights": weights}


def two_ranks(cpu: bool) -> dict[str, Any]:
    """Two launched ranks (one per GPU, NCCL; or gloo on the CPU) against one process that
    trains on the whole batches: averaged half-batch gradients are the whole batch's, so the
    weights must agree to float32 rounding."""
    from nbaccel import notebook_launcher

    batches = _data()[:10]
    ranks = notebook_launcher(_ddp_rank, (batches,), num_processes=2, cpu=cpu)
    device = torch.device("cpu" if cpu else "cuda:0")
    model = _model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for x, y in batches:
        nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
        optimizer.step()
        optimizer.zero_grad()
    alone = [p.detach().cpu().flatten() for p in model.parameters()]
    gaps = [
        max(
            float((torch.tensor(w) - a).abs().max())
            for w, a in zip(r["weights"], alone, strict=True)
        )
        for r in ranks
    ]
    return {"devices": [r["device"] for r in ranks], "backends": [r["backend"] for r in ranks],
            "largest_gap": max(gaps)}  # fmt: skip


@check
def two_gpus() -> dict[str, Any]:
    return two_ranks(cpu=False)


if __name__ == "__main__":
    print(json.dumps(CHECKS[sys.argv[1]]()))
