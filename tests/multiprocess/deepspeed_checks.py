"""Rank-side DeepSpeed checks, run in order in one launch of real gloo ranks with the real
``deepspeed``: training equals one process, accumulation, precision, exact resume."""

from __future__ import annotations

import contextlib
import os
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from nbaccel import Accelerator, AcceleratorState, DistributedType, PartialState
from nbaccel.utils import DeepSpeedPlugin

CHECKS: list[Callable[[str], None]] = []
MICRO = 4  # samples per rank and batch
SAMPLES = 64
LR = 1e-2
ATOL = 1e-6  # fp32 DeepSpeed vs the single-process reference


def check(function: Callable[[str], None]) -> Callable[[str], None]:
    CHECKS.append(function)
    return function


def run_all_checks(root: str, only: list[str] | None = None) -> dict[str, str]:
    """``{check: "ok" or the traceback}`` for every check (each in a fresh state)."""
    results = {}
    warnings.simplefilter("ignore")
    for function in CHECKS:
        if only is not None and function.__name__ not in only:
            continue
        try:
            function(root)
            results[function.__name__] = "ok"
        except BaseException:
            results[function.__name__] = traceback.format_exc()
        AcceleratorState._reset_state()
    return results


class Net(nn.Module):
    def __init__(self, seed: int = 0, width: int = 16) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.lin1 = nn.Linear(8, width)
        self.lin2 = nn.Linear(width, 1)
        self.config = SimpleNamespace(hidden_size=width)  # what "auto" bucket sizes read

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin2(torch.relu(self.lin1(x)))


def dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(SAMPLES, 8, generator=g), torch.randn(SAMPLES, 1, generator=g))


def loader() -> DataLoader:
    return DataLoader(dataset(), batch_size=MICRO)


def reference(accum: int = 1, clip: float = 1.0, steps: int | None = None) -> dict[str, Any]:
    """One process over the whole global batches (every rank's micro batches together)."""
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    world = PartialState().num_processes
    batches = list(DataLoader(dataset(), batch_size=MICRO * world))
    for i in range(0, len(batches) if steps is None else steps * accum, accum):
        for x, y in batches[i : i + accum]:
            (nn.functional.mse_loss(model(x), y) / accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad()
    return model.state_dict()


def prepared(plugin: DeepSpeedPlugin, seed: int = 0, **kwargs: Any) -> tuple[Any, ...]:
    acc = Accelerator(deepspeed_plugin=plugin, **kwargs)
    model = Net(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    engine, opt, data = acc.prepare(model, opt, loader())
    return acc, engine, opt, data


def train(acc: Accelerator, model: Any, opt: Any, data: Any, batches: range | None = None) -> None:
    for i, (x, y) in enumerate(data):
        if batches is not None and i not in batches:
            continue
        with acc.accumulate(model):
            acc.backward(nn.functional.mse_loss(model(x), y))
            opt.step()
            opt.zero_grad()


def same(got: dict[str, Any], want: dict[str, Any], atol: float = ATOL) -> None:
    if not PartialState().is_main_process:
        return
    assert got.keys() == want.keys(), (sorted(got), sorted(want))
    for key in want:
        diff = (got[key].float() - want[key].float()).abs().max().item()
        assert diff <= atol, f"{key}: differs by {diff}"


def stage_check(stage: int) -> Callable[[str], None]:
    def equals_one_process(root: str) -> None:
        acc, engine, opt, data = prepared(DeepSpeedPlugin(zero_stage=stage))
        assert acc.distributed_type == DistributedType.DEEPSPEED
        assert type(engine).__name__ == "DeepSpeedEngine"
        assert engine.zero_optimization_stage() == stage
        assert acc.state.deepspeed_plugin.zero_stage == stage
        assert isinstance(acc.unwrap_model(engine), Net)
        if stage == 3:  # fp32 shards are the optimizer's master weights: one copy, not two
            zero = engine.optimizer
            pairs = list(
                zip(
                    zero.fp16_partitioned_groups_flat,
                    zero.fp32_partitioned_groups_flat,
                    strict=True,
                )
            )
            assert pairs and all(shard.data_ptr() == master.data_ptr() for shard, master in pairs)
        train(acc, engine, opt, data)
        same(acc.get_state_dict(engine), reference())

    equals_one_process.__name__ = f"zero{stage}_equals_one_process"
    return equals_one_process


for _stage in (0, 1, 2, 3):
    check(stage_check(_stage))


@check
def accumulation_comes_from_the_plugin(root: str) -> None:
    plugin = DeepSpeedPlugin(zero_stage=2, gradient_accumulation_steps=2)
    acc, engine, opt, data = prepared(plugin)
    assert acc.gradient_accumulation_steps == 2
    assert engine.gradient_accumulation_steps() == 2
    assert plugin.deepspeed_config["train_batch_size"] == MICRO * 2 * acc.num_processes
    train(acc, engine, opt, data)
    assert engine.global_steps == SAMPLES // (MICRO * acc.num_processes) // 2
    same(acc.get_state_dict(engine), reference(accum=2))


@check
def the_accelerators_accumulation_fills_auto(root: str) -> None:
    acc, engine, opt, data = prepared(DeepSpeedPlugin(zero_stage=1), gradient_accumulation_steps=2)
    assert engine.gradient_accumulation_steps() == 2
    train(acc, engine, opt, data)
    same(acc.get_state_dict(engine), reference(accum=2))


@check
def clipping_follows_the_plugin(root: str) -> None:
    acc, engine, opt, data = prepared(DeepSpeedPlugin(zero_stage=2, gradient_clipping=0.05))
    for x, y in data:
        acc.backward(nn.functional.mse_loss(engine(x), y))
        norm = acc.clip_grad_norm_(engine.parameters(), 0.05)
        assert torch.isfinite(norm) and norm > 0
        opt.step()
        opt.zero_grad()
    same(acc.get_state_dict(engine), reference(clip=0.05))
    with contextlib.suppress(NotImplementedError):
        acc.clip_grad_value_(engine.parameters(), 0.1)
        raise AssertionError("clip_grad_value_ under DeepSpeed did not refuse")


@check
def bf16_trains_in_bf16(root: str) -> None:
    acc, engine, opt, data = prepared(DeepSpeedPlugin(zero_stage=2), mixed_precision="bf16")
    assert engine.bfloat16_enabled() and not engine.fp16_enabled()
    assert next(engine.module.parameters()).dtype == torch.bfloat16
    train(acc, engine, opt, data)
    weights = acc.get_state_dict(engine)
    assert all(v.dtype == torch.bfloat16 for v in weights.values())
    same(weights, reference(), atol=0.03)  # bf16 rounding of 8 AdamW steps, not a divergence


@check
def deepspeed_counts_this_machines_ranks(root: str) -> None:
    from deepspeed.accelerator import get_accelerator

    prepared(DeepSpeedPlugin(zero_stage=3))
    local = str(PartialState().num_processes)  # one machine here
    assert os.environ["LOCAL_SIZE"] == local, os.environ.get("LOCAL_SIZE")
    assert get_accelerator().device_count() == int(local)  # not from `numactl` at each step


@check
def zero3_in_bf16_keeps_fp32_masters_apart(root: str) -> None:
    acc, engine, opt, data = prepared(DeepSpeedPlugin(zero_stage=3), mixed_precision="bf16")
    zero = engine.optimizer
    pairs = list(
        zip(zero.fp16_partitioned_groups_flat, zero.fp32_partitioned_groups_flat, strict=True)
    )
    assert pairs
    for shard, master in pairs:
        assert (shard.dtype, master.dtype) == (torch.bfloat16, torch.float32)
        assert shard.data_ptr() != master.data_ptr()
    train(acc, engine, opt, data)
    same(acc.get_state_dict(engine), reference(), atol=0.03)


@check
def fp16_on_the_cpu_trains_in_full_precision(root: str) -> None:
    acc, engine, opt, data = prepared(DeepSpeedPlugin(zero_stage=2), mixed_precision="fp16")
    assert acc.mixed_precision == "fp16" and not engine.fp16_enabled()
    train(acc, engine, opt, data)
    same(acc.get_state_dict(engine), reference())


def resume_check(stage: int, offload: bool) -> Callable[[str], None]:
    def resumes_exactly(root: str) -> None:
        plugin = {"offload_optimizer_device": "cpu"} if offload else {}
        if offload and stage == 3:
            plugin["offload_param_device"] = "cpu"
        target = Path(root) / f"zero{stage}_{'offload' if offload else 'plain'}"
        acc, engine, opt, data = prepared(DeepSpeedPlugin(zero_stage=stage, **plugin))
        train(acc, engine, opt, data, range(0, 3))
        acc.save_state(target)
        train(acc, engine, opt, data, range(3, 8))
        whole = acc.get_state_dict(engine)
        AcceleratorState._reset_state()
        acc, engine, opt, data = prepared(DeepSpeedPlugin(zero_stage=stage, **plugin), seed=7)
        acc.load_state(target)
        train(acc, engine, opt, acc.skip_first_batches(data, 3))
        same(acc.get_state_dict(engine), whole, atol=0.0)
        if not offload:
            same(whole, reference())

    resumes_exactly.__name__ = f"zero{stage}{'_offload' if offload else ''}_resumes_exactly"
    return resumes_exactly


for _stage, _offload in ((2, False), (3, False), (3, True)):
    check(resume_check(_stage, _offload))
