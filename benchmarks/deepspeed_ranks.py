"""The ranks of the ``deepspeed`` benchmark: one MLP trained the same way by every subject.

Two kinds of launch run this code. nbaccel's ranks (:func:`nbaccel_ranks`, started by
``notebook_launcher``) train through ``Accelerator``: ZeRO-2 and ZeRO-3 with
``DeepSpeedPlugin(zero_stage=N)``, then plain DDP without a plugin. The hand-written ranks
(``python -m torch.distributed.run --nproc_per_node 2 -m benchmarks.deepspeed_ranks JSON``)
drive DeepSpeed themselves: ``deepspeed.init_distributed``, ``deepspeed.initialize`` with
:func:`hand_config` and ``engine.backward`` / ``engine.step``; they never import nbaccel.

Each subject builds the model, runs ``warmup`` untimed steps, times ``steps`` steps one by one
(``time.perf_counter`` around each), and reports the step times, its losses, the settings
DeepSpeed parsed (:func:`effective_config`) and, for ZeRO-3 and DDP, the bytes of parameters,
gradients and optimizer state this rank holds (:func:`held_bytes`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Subset, TensorDataset

__all__ = [
    "CLIP",
    "Setup",
    "effective_config",
    "hand_config",
    "held_bytes",
    "main",
    "nbaccel_ranks",
]

CLIP = 1.0  # DeepSpeed's gradient_clipping ("auto" is 1.0 in nbaccel, as in Accelerate)
MEMORY_SUBJECTS = ("zero3", "ddp")  # whose bytes are counted


@dataclass(frozen=True)
class Setup:
    """What every subject trains; identical for all of them.

    Attributes:
        world: ranks.
        width: input width and the width of every hidden layer.
        layers: hidden ``Linear(width, width) + ReLU`` blocks (then ``Linear(width, classes)``).
        classes: outputs.
        batch: samples per rank per step.
        warmup: untimed steps before the timed ones, in every subject.
        steps: timed steps per subject.
        threads: torch threads per rank.
        seed: seeds the model and the data.
    """

    world: int = 2
    width: int = 1024
    layers: int = 4
    classes: int = 10
    batch: int = 32
    warmup: int = 10
    steps: int = 50
    threads: int = 1
    seed: int = 0


# -- what every subject builds ----------------------------------------------------------------
def _build(setup: Setup) -> tuple[nn.Module, torch.optim.Optimizer, TensorDataset]:
    torch.manual_seed(setup.seed)
    blocks: list[nn.Module] = []
    for _ in range(setup.layers):
        blocks += [nn.Linear(setup.width, setup.width), nn.ReLU()]
    model = nn.Sequential(*blocks, nn.Linear(setup.width, setup.classes))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(setup.seed + 1)
    total = (setup.warmup + setup.steps) * setup.batch * setup.world
    inputs = torch.randn(total, setup.width, generator=generator)
    targets = torch.randint(0, setup.classes, (total,), generator=generator)
    return model, optimizer, TensorDataset(inputs, targets)


def hand_config(stage: int, setup: Setup) -> dict[str, Any]:
    """The DeepSpeed config the hand-written ranks pass to ``deepspeed.initialize``: what
    ``DeepSpeedPlugin(zero_stage=stage)`` fills in for this loader (checked by the parent
    against :func:`effective_config` of both)."""
    return {
        "train_batch_size": setup.batch * setup.world,
        "train_micro_batch_size_per_gpu": setup.batch,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": CLIP,
        "zero_optimization": {"stage": stage},
        "steps_per_print": 10**9,
    }


def effective_config(engine: Any) -> dict[str, Any]:
    """What DeepSpeed made of its config: batch sizes, clipping, precision, the ZeRO
    settings and the optimizers (JSON-safe). An offload section whose device is ``"none"``
    (what the plugin writes) is no offload, as an absent one is."""
    zero = json.loads(json.dumps(engine._config.zero_config.model_dump(), default=str))
    for key in ("offload_param", "offload_optimizer"):
        if isinstance(zero.get(key), dict) and zero[key].get("device") == "none":
            zero[key] = None
    return {
        "train_batch_size": engine.train_batch_size(),
        "micro_batch": engine.train_micro_batch_size_per_gpu(),
        "accumulation": engine.gradient_accumulation_steps(),
        "clipping": engine.gradient_clipping(),
        "fp16": engine.fp16_enabled(),
        "bf16": engine.bfloat16_enabled(),
        "zero": zero,
        "optimizer": type(engine.optimizer).__name__,
        "inner_optimizer": type(engine.optimizer.optimizer).__name__,
    }


# -- bytes held ---------------------------------------------------------------------------------
def _extents(tensors: list[Any]) -> list[tuple[int, int]]:
    out = []
    for t in tensors:
        if torch.is_tensor(t) and t.numel() > 0:
            start = t.data_ptr()
            out.append((start, start + t.numel() * t.element_size()))
    return out


def _union(extents: list[tuple[int, int]]) -> int:
    total, end = 0, -1
    for start, stop in sorted(extents):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def _counted(parts: dict[str, list[Any]]) -> dict[str, int]:
    """Bytes per part, memory that an earlier part already holds not counted again (a view
    or an alias counts once: the address ranges are merged)."""
    seen: list[tuple[int, int]] = []
    out: dict[str, int] = {}
    for name, tensors in parts.items():
        before = _union(seen)
        seen += _extents(tensors)
        out[name] = _union(seen) - before
    return out


def held_bytes(model: nn.Module, optimizer: Any, engine: Any = None) -> dict[str, int]:
    """Bytes of parameters, gradients and optimizer state this rank holds, counted from the
    tensors themselves. DDP: every parameter, its ``.grad``, the torch optimizer's state.
    ZeRO-3 (``engine`` given): each parameter's shard ``p.ds_tensor`` (and ``p.data`` where it
    is not released: the small parameters ZeRO-3 keeps whole), the gradient partitions
    (``grad_partitions_flat_buffer`` and the fp32 partitions' ``.grad``), the inner torch
    optimizer's state and the fp32 partitions it steps; where those are a copy of the
    parameter shards rather than the shards themselves, ``fp32_copy`` says how many bytes."""
    params = list(model.parameters())
    grads = [p.grad for p in params if p.grad is not None]
    tensors: list[Any]
    if engine is None:
        tensors = [p.detach() for p in params]
        inner = optimizer
    else:
        zero = engine.optimizer
        tensors = [getattr(p, "ds_tensor", None) for p in params] + [p.data for p in params]
        flat = list(zero.fp32_partitioned_groups_flat)
        grads += [zero.grad_partitions_flat_buffer] + [f.grad for f in flat if f.grad is not None]
        inner = zero.optimizer
    state = [v for s in inner.state.values() for v in s.values() if torch.is_tensor(v) and v.dim()]
    if engine is None:
        counted = _counted({"params": tensors, "grads": grads, "optimizer": state})
        return {**counted, "bytes": sum(counted.values())}
    counted = _counted({"params": tensors, "grads": grads, "state": state, "copy": flat})
    return {
        "params": counted["params"],
        "grads": counted["grads"],
        "optimizer": counted["state"] + counted["copy"],
        "bytes": sum(counted.values()),
        "fp32_copy": counted["copy"],  # fp32 partitions that are not the parameter shards
    }


# -- the timed loop ---------------------------------------------------------------------------
def _my_batches(data: TensorDataset, setup: Setup) -> DataLoader:
    """This rank's batches, as nbaccel's prepared loader deals them: global step k trains on
    samples [k * batch * world, (k + 1) * batch * world), rank r on its r-th slice."""
    rank, size, world = dist.get_rank(), setup.batch, setup.world
    mine = [
        i
        for k in range(len(data) // (size * world))
        for i in range((k * world + rank) * size, (k * world + rank + 1) * size)
    ]
    return DataLoader(Subset(data, mine), batch_size=size)


def _timed(
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], batches: Iterator[Any], setup: Setup
) -> dict[str, Any]:
    """``warmup`` untimed steps, then ``steps`` steps timed one by one between two barriers
    (wall time of each step, and the CPU time of the whole process over all of them)."""
    losses = []
    for _ in range(setup.warmup):
        losses.append(step(*next(batches)).detach())
    dist.barrier()
    times = []
    started, cpu_started = time.perf_counter(), time.process_time()
    for _ in range(setup.steps):
        before = time.perf_counter()
        losses.append(step(*next(batches)).detach())  # the batch's loading is in its step
        times.append(time.perf_counter() - before)
    cpu = time.process_time() - cpu_started  # every thread of this rank; waiting costs none
    dist.barrier()
    return {
        "step_s": times,
        "seconds": time.perf_counter() - started,
        "cpu_s": cpu,
        "losses": [float(loss) for loss in losses],
        "threads": torch.get_num_threads(),
    }


# -- nbaccel's ranks --------------------------------------------------------------------------
def _nbaccel_subject(subject: str, setup: Setup) -> dict[str, Any]:
    from nbaccel import Accelerator, AcceleratorState
    from nbaccel.utils import DeepSpeedPlugin

    torch.set_num_threads(setup.threads)
    plugin = None if subject == "ddp" else DeepSpeedPlugin(zero_stage=int(subject[-1]))
    acc = Accelerator(cpu=True, deepspeed_plugin=plugin)
    model, optimizer, data = _build(setup)
    model, optimizer, loader = acc.prepare(model, optimizer, DataLoader(data, setup.batch))
    torch.set_num_threads(setup.threads)  # whatever a framework did, every subject runs alike
    clip = plugin is None  # DeepSpeed clips inside its step, at the config's gradient_clipping

    def step(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs), targets)
        acc.backward(loss)
        if clip:
            acc.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        return loss

    out = _timed(step, iter(loader), setup)
    if plugin is not None:
        out["config"] = effective_config(model)
    if subject in MEMORY_SUBJECTS:
        engine = model if plugin is not None else None
        out["memory"] = held_bytes(acc.unwrap_model(model), optimizer.optimizer, engine)
    acc.free_memory()
    AcceleratorState._reset_state()  # the next subject's Accelerator starts afresh
    return out


def nbaccel_ranks(subjects: list[str], setup: Setup) -> dict[str, Any]:
    """One rank of an nbaccel launch (``notebook_launcher``): each subject in turn."""
    return {subject: _nbaccel_subject(subject, setup) for subject in subjects}


# -- the hand-written ranks (torchrun) ----------------------------------------------------------
def _hand_subject(subject: str, setup: Setup) -> dict[str, Any]:
    import deepspeed

    torch.set_num_threads(setup.threads)
    stage = int(subject[-1])
    model, optimizer, data = _build(setup)
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, config=hand_config(stage, setup)
    )
    torch.set_num_threads(setup.threads)

    def step(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.cross_entropy(engine(inputs), targets)
        engine.backward(loss)
        engine.step()
        return loss

    out = _timed(step, iter(_my_batches(data, setup)), setup)
    out["config"] = effective_config(engine)
    if subject in MEMORY_SUBJECTS:
        out["memory"] = held_bytes(engine.module, None, engine)
    engine.destroy()
    return out


def main(argv: list[str]) -> int:
    """A torchrun rank: ``argv[0]`` is ``{"subjects": [...], "setup": {...}, "out": dir}``;
    each rank writes ``out/rank<r>.json``."""
    request = json.loads(argv[0])
    setup = Setup(**request["setup"])
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    results = {subject: _hand_subject(subject, setup) for subject in request["subjects"]}
    path = os.path.join(request["out"], f"rank{dist.get_rank()}.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(results, handle)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def request(subjects: list[str], setup: Setup, out: str) -> str:
    """The argument :func:`main` reads."""
    return json.dumps({"subjects": subjects, "setup": asdict(setup), "out": out})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
