"""Rank-side checks of the Accelerator on one real gloo process group (every rank runs all).

``run_all_checks`` runs every check with a fresh nbaccel state (the process group is kept) and
returns ``{"checks": {name: "ok" or traceback}, "parity": {case: training record}}``; the
parity records are compared with a one-process reference by the test in the pytest process.
"""

from __future__ import annotations

import contextlib
import gc
import io
import time
import traceback
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import seed_examples
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, Sampler, TensorDataset

from nbaccel import (
    Accelerator,
    DataLoaderConfiguration,
    DistributedDataParallelKwargs,
    DistributedType,
    GradientAccumulationPlugin,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    skip_first_batches,
)
from nbaccel.optim import AcceleratedOptimizer
from nbaccel.testing import reset_state

CHECKS: list[Callable[[], None]] = []


def check(function: Callable[[], None]) -> Callable[[], None]:
    """Register a check; checks run in the order they are defined."""
    CHECKS.append(function)
    return function


for _example in seed_examples.EXAMPLES:
    check(_example)


def all_ranks(value: Any) -> list[Any]:
    """``value`` from every rank, in rank order."""
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def flat_grads(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.detach().flatten().clone() for p in model.parameters()])


def tiny(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))


def rank_batch(rank: int, n: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Data that differs on every rank."""
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(n, 3, generator=gen)
    return x, x.sum(dim=1, keepdim=True) * (rank + 1)


def loss_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(model(x), y)


def batches(loader: Any) -> list[list[int]]:
    return [b.tolist() for b in loader]


# --- parity: N processes x batch b == 1 process x batch N*b ----------------------------------

PER_RANK_BATCH = 4
PARITY_SAMPLES = 48
PARITY_EPOCHS = 2
# case -> (gradient_accumulation_steps, split_batches)
PARITY_CASES = {
    "plain": (1, False),
    "accumulate-3": (3, False),
    "split": (1, True),
    "split-accumulate-2": (2, True),
}


def parity_dataset() -> TensorDataset:
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(PARITY_SAMPLES, 5, generator=gen)
    y = torch.tanh(x @ torch.randn(5, 2, generator=gen))
    return TensorDataset(torch.arange(PARITY_SAMPLES), x, y)


def parity_model() -> nn.Module:
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2))


def parity_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)


def train_for_parity(case: str, loader_batch_size: int) -> dict[str, Any]:
    """Train with the Accelerator; the final weights and the sample indices of every batch."""
    accumulation, split = PARITY_CASES[case]
    accelerator = Accelerator(
        gradient_accumulation_steps=accumulation,
        dataloader_config=DataLoaderConfiguration(split_batches=split),
    )
    model = parity_model()
    optimizer = parity_optimizer(model)
    loader = DataLoader(parity_dataset(), batch_size=loader_batch_size, shuffle=False)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    seen: list[list[int]] = []
    for _ in range(PARITY_EPOCHS):
        for index, x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(nn.functional.mse_loss(model(x), y))
                optimizer.step()
                optimizer.zero_grad()
            seen.append(index.tolist())
    state = accelerator.unwrap_model(model).state_dict()
    return {
        "weights": {k: v.detach().clone() for k, v in state.items()},
        "seen": seen,
        "num_processes": accelerator.num_processes,
    }


def parity_on_this_rank(world: int) -> dict[str, Any]:
    out = {}
    for case, (_, split) in PARITY_CASES.items():
        reset_state()
        size = PER_RANK_BATCH * world if split else PER_RANK_BATCH
        try:
            out[case] = train_for_parity(case, size)
        except BaseException:
            out[case] = {"error": traceback.format_exc()}
    return out


def run_all_checks() -> dict[str, Any]:
    """Run every check on this rank, then the parity training cases."""
    results: dict[str, str] = {}
    for function in CHECKS:
        reset_state()
        try:
            function()
            results[function.__name__] = "ok"
        except BaseException:
            results[function.__name__] = traceback.format_exc()
        dist.barrier()  # a failed check must not leave a peer waiting in the next one
    reset_state()
    parity = parity_on_this_rank(dist.get_world_size())
    reset_state()
    return {"checks": results, "parity": parity}


# --- attributes and prepare ------------------------------------------------------------------


@check
def attributes_describe_this_rank() -> None:
    acc = Accelerator()
    rank, world = dist.get_rank(), dist.get_world_size()
    assert acc.num_processes == world and acc.process_index == rank
    assert acc.local_process_index == rank  # one machine
    assert acc.is_main_process == (rank == 0) and acc.is_local_main_process == (rank == 0)
    assert acc.distributed_type == DistributedType.MULTI_CPU
    assert acc.use_distributed is True
    assert acc.device == torch.device("cpu")
    assert acc.mixed_precision == "no" and acc.sync_gradients is True
    assert acc.state.num_processes == world


@check
def prepare_wraps_models_in_ddp_and_keeps_the_order() -> None:
    acc = Accelerator()
    model = tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    loader = DataLoader(list(range(12)), batch_size=2)
    marker = object()
    out = acc.prepare(loader, marker, scheduler, model, optimizer)
    p_loader, p_marker, p_scheduler, p_model, p_optimizer = out
    assert isinstance(p_model, nn.parallel.DistributedDataParallel)
    assert p_model.module is model and acc.unwrap_model(p_model) is model
    assert p_marker is marker
    assert isinstance(p_optimizer, AcceleratedOptimizer) and p_optimizer.optimizer is optimizer
    assert p_scheduler.scheduler is scheduler
    assert p_loader.dataset is loader.dataset
    world = acc.num_processes
    assert len(p_loader) == -(-6 // world)
    # models without trainable parameters are not wrapped
    frozen = nn.Linear(2, 2).requires_grad_(False)
    assert acc.prepare(frozen) is frozen


@check
def ddp_and_process_group_kwargs_handlers_are_used() -> None:
    acc = Accelerator(
        kwargs_handlers=[
            DistributedDataParallelKwargs(find_unused_parameters=True, bucket_cap_mb=1),
            InitProcessGroupKwargs(),
        ]
    )
    model = acc.prepare(tiny())
    assert model.find_unused_parameters is True
    assert model.bucket_bytes_cap == 1024 * 1024


# --- gradients -------------------------------------------------------------------------------


@check
def backward_averages_gradients_across_ranks() -> None:
    acc = Accelerator()
    rank, world = acc.process_index, acc.num_processes
    model = acc.prepare(tiny())
    acc.backward(loss_of(model, *rank_batch(rank)))
    grads = all_ranks(flat_grads(model))
    local = []
    for r in range(world):
        reference = tiny()
        loss_of(reference, *rank_batch(r)).backward()
        local.append(flat_grads(reference))
    assert not torch.allclose(local[0], local[1])  # the ranks really had different data
    for g in grads:
        torch.testing.assert_close(g, torch.stack(local).mean(0))


@check
def no_sync_keeps_gradients_local() -> None:
    acc = Accelerator()
    rank = acc.process_index
    model = acc.prepare(tiny())
    with acc.no_sync(model):
        acc.backward(loss_of(model, *rank_batch(rank)))
    grads = all_ranks(flat_grads(model))
    reference = tiny()
    loss_of(reference, *rank_batch(rank)).backward()
    torch.testing.assert_close(grads[rank], flat_grads(reference))
    assert not torch.allclose(grads[0], grads[1])


def accumulate_over_a_loader(plugin: GradientAccumulationPlugin) -> list[tuple[bool, bool, bool]]:
    """Per batch: (sync_gradients, grads equal on all ranks, weights changed)."""
    acc = Accelerator(gradient_accumulation_plugin=plugin)
    rank, world = acc.process_index, acc.num_processes
    model = tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(5 * 2 * world, 3, generator=gen)  # 5 batches of 2 per rank
    y = x.sum(1, keepdim=True) * (torch.arange(len(x)) % 3 + 1).unsqueeze(1)
    loader = DataLoader(TensorDataset(x, y), batch_size=2)
    model, optimizer, loader = acc.prepare(model, optimizer, loader)
    assert len(loader) == 5
    record = []
    for bx, by in loader:
        with acc.accumulate(model):
            before = next(model.parameters()).detach().clone()
            acc.backward(loss_of(model, bx, by))
            grads = all_ranks(flat_grads(model))
            optimizer.step()
            optimizer.zero_grad()
            changed = not torch.equal(before, next(model.parameters()))
        same = all(torch.allclose(g, grads[0]) for g in grads)
        record.append((acc.sync_gradients, same, changed))
    del rank
    return record


@check
def accumulate_synchronises_every_n_batches_and_on_the_last_batch() -> None:
    record = accumulate_over_a_loader(GradientAccumulationPlugin(num_steps=2))
    # batches 2 and 4 complete a cycle; batch 5 is the last of the epoch and syncs too
    expected = [(False, False, False), (True, True, True)] * 2 + [(True, True, True)]
    assert record == expected, record
    record = accumulate_over_a_loader(GradientAccumulationPlugin(num_steps=4))
    expected = [(False, False, False)] * 3 + [(True, True, True)] * 2
    assert record == expected, record


@check
def accumulate_and_no_sync_cover_every_model_given() -> None:
    acc = Accelerator(gradient_accumulation_steps=2)
    rank = acc.process_index
    first, second = acc.prepare(tiny(0), tiny(1))
    for model in (first, second):
        with acc.no_sync(model):
            acc.backward(loss_of(model, *rank_batch(rank)))
        grads = all_ranks(flat_grads(model))
        assert not torch.allclose(grads[0], grads[1])
        model.zero_grad()
    with acc.accumulate(first, second):  # batch 1 of 2: neither synchronises
        acc.backward(loss_of(first, *rank_batch(rank)) + loss_of(second, *rank_batch(rank)))
    local = [all_ranks(flat_grads(m)) for m in (first, second)]
    assert all(not torch.allclose(g[0], g[1]) for g in local)
    with acc.accumulate(first, second):  # batch 2 of 2: both synchronise
        acc.backward(loss_of(first, *rank_batch(rank)) + loss_of(second, *rank_batch(rank)))
    synced = [all_ranks(flat_grads(m)) for m in (first, second)]
    assert all(torch.allclose(g[0], g[-1]) for g in synced)


@check
def sync_each_batch_synchronises_but_steps_every_n_batches() -> None:
    plugin = GradientAccumulationPlugin(num_steps=2, sync_each_batch=True)
    record = accumulate_over_a_loader(plugin)
    expected = [(False, True, False), (True, True, True)] * 2 + [(True, True, True)]
    assert record == expected, record


@check
def clip_grad_norm_is_the_same_global_norm_on_every_rank() -> None:
    acc = Accelerator()
    model = acc.prepare(tiny())
    acc.backward(loss_of(model, *rank_batch(acc.process_index, 8)) * 100)
    expected = torch.linalg.vector_norm(flat_grads(model))
    norm = acc.clip_grad_norm_(model.parameters(), max_norm=0.5)
    torch.testing.assert_close(norm, expected)
    norms = all_ranks(norm)
    assert all(torch.equal(n, norms[0]) for n in norms)
    torch.testing.assert_close(torch.linalg.vector_norm(flat_grads(model)), torch.tensor(0.5))


# --- optimizer, scheduler and precision --------------------------------------------------------


def lr_after_one_step(**kwargs: Any) -> float:
    reset_state()
    acc = Accelerator(**kwargs)
    model = tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, scheduler = acc.prepare(model, optimizer, scheduler)
    acc.backward(loss_of(model, *rank_batch(acc.process_index)))
    optimizer.step()
    scheduler.step()
    return scheduler.get_last_lr()[0]


@check
def scheduler_steps_once_per_process_unless_batches_are_split() -> None:
    world = dist.get_world_size()
    assert lr_after_one_step() == 0.5**world  # each process consumed a batch
    split = DataLoaderConfiguration(split_batches=True)
    assert lr_after_one_step(dataloader_config=split) == 0.5
    assert lr_after_one_step(step_scheduler_with_optimizer=False) == 0.5


@check
def fp16_on_cpu_ranks_trains_in_fp32_without_a_scaler() -> None:
    """As in Accelerate: no autocast, no scaler, the step not skipped (the scaler's skip on an
    overflow is checked where fp16 trains: tests/gpu)."""
    acc = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=64.0)])
    assert acc.mixed_precision == "fp16" and acc.scaler is None
    model = tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, scheduler = acc.prepare(model, optimizer, scheduler)
    before = [p.detach().clone() for p in model.parameters()]
    x, y = rank_batch(acc.process_index)
    out = model(x)
    assert out.dtype == torch.float32
    acc.backward(nn.functional.mse_loss(out, y))
    optimizer.step()
    scheduler.step()
    assert acc.optimizer_step_was_skipped is False
    assert scheduler.get_last_lr() == [0.1 * 0.5**acc.num_processes]  # once per process
    assert not all(torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))


@check
def bf16_ddp_forward_computes_in_bf16_and_returns_fp32() -> None:
    acc = Accelerator(mixed_precision="bf16")
    model = tiny()
    seen: list[torch.dtype] = []
    model[0].register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    model = acc.prepare(model)
    out = model(torch.ones(2, 3))
    assert seen == [torch.bfloat16] and out.dtype == torch.float32
    with acc.autocast():
        assert nn.Linear(2, 2)(torch.ones(1, 2)).dtype == torch.bfloat16


@check
def free_memory_releases_ddp_models_optimizers_and_loaders() -> None:
    acc = Accelerator()
    model = tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(*rank_batch(0, 12)), batch_size=2)
    model, optimizer, loader = acc.prepare(model, optimizer, loader)
    for x, y in loader:
        acc.backward(loss_of(model, x, y))
        optimizer.step()
        optimizer.zero_grad()
    refs = [weakref.ref(o) for o in (model, model.module, optimizer, loader)]
    acc.free_memory()
    del model, optimizer, loader, x, y
    gc.collect()
    assert [r() for r in refs] == [None] * 4


# --- data loaders ------------------------------------------------------------------------------


class EveryThird(Sampler[int]):
    """A custom sampler (no distributed version of it exists)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[int]:
        return iter([i for k in range(3) for i in range(k, self.n, 3)])

    def __len__(self) -> int:
        return self.n


class Stream(IterableDataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.n))


def interleaved(per_rank: list[list[list[int]]]) -> list[int]:
    """The global order: batch i of rank 0, of rank 1, ..., then batch i + 1."""
    out: list[int] = []
    for step in range(max(len(b) for b in per_rank)):
        for rank_batches in per_rank:
            if step < len(rank_batches):
                out += rank_batches[step]
    return out


@check
def loaders_are_sharded_whatever_the_sampler() -> None:
    world = dist.get_world_size()
    n = 6 * world
    for kwargs in ({}, {"sampler": EveryThird(n)}, {"shuffle": True}):
        reset_state()
        acc = Accelerator()
        plain = DataLoader(list(range(n)), batch_size=2, **kwargs)  # type: ignore[arg-type]
        loader = acc.prepare(plain)
        assert len(loader) == 3
        per_rank = all_ranks(batches(loader))
        assert sorted(interleaved(per_rank)) == list(range(n)), (kwargs, per_rank)
        if "sampler" in kwargs:
            assert interleaved(per_rank) == list(EveryThird(n))


@check
def shuffling_is_synchronised_and_changes_every_epoch() -> None:
    acc = Accelerator()
    world = acc.num_processes
    loader = acc.prepare(DataLoader(list(range(8 * world)), batch_size=2, shuffle=True))
    epochs = [interleaved(all_ranks(batches(loader))) for _ in range(3)]
    for order in epochs:
        assert sorted(order) == list(range(8 * world))
    assert epochs[0] != epochs[1] and epochs[1] != epochs[2]
    loader.set_epoch(1)
    assert interleaved(all_ranks(batches(loader))) == epochs[1]


@check
def split_batches_cut_each_batch() -> None:
    acc = Accelerator(dataloader_config=DataLoaderConfiguration(split_batches=True))
    world, rank = acc.num_processes, acc.process_index
    loader = acc.prepare(DataLoader(list(range(4 * world)), batch_size=2 * world))
    assert len(loader) == 2 and loader.batch_size == 2 and loader.total_batch_size == 2 * world
    assert batches(loader) == [
        [2 * rank, 2 * rank + 1],
        [2 * world + 2 * rank, 2 * world + 2 * rank + 1],
    ]


@check
def even_batches_pad_and_uneven_batches_do_not() -> None:
    world = dist.get_world_size()
    n = 2 * world + 1  # one sample past a whole number of global batches
    acc = Accelerator()
    even = all_ranks(batches(acc.prepare(DataLoader(list(range(n)), batch_size=2))))
    assert [len(b) for b in even] == [2] * world
    assert interleaved(even)[:n] == list(range(n))
    reset_state()
    acc = Accelerator(dataloader_config=DataLoaderConfiguration(even_batches=False))
    loader = acc.prepare(DataLoader(list(range(n)), batch_size=2))
    uneven = all_ranks(batches(loader))
    assert [len(b) for b in uneven] == [2] + [1] * (world - 1)
    assert interleaved(uneven) == list(range(n))


@check
def dispatch_batches_and_iterable_datasets() -> None:
    world = dist.get_world_size()
    n = 4 * world
    acc = Accelerator(dataloader_config=DataLoaderConfiguration(dispatch_batches=True))
    dispatched = all_ranks(batches(acc.prepare(DataLoader(list(range(n)), batch_size=2))))
    assert interleaved(dispatched) == list(range(n))
    reset_state()
    acc = Accelerator()
    streamed = all_ranks(batches(acc.prepare(DataLoader(Stream(n), batch_size=2))))
    assert sorted(interleaved(streamed)) == list(range(n))
    assert all(len(b) == 2 for b in streamed)


@check
def skip_first_batches_through_the_accelerator() -> None:
    acc = Accelerator()
    loader = acc.prepare(DataLoader(list(range(8 * acc.num_processes)), batch_size=2))
    full = batches(loader)
    assert batches(acc.skip_first_batches(loader, 1)) == full[1:]
    assert batches(skip_first_batches(loader, 3)) == full[3:]
    assert len(acc.skip_first_batches(loader, 2)) == len(full) - 2


# --- collectives through the Accelerator -------------------------------------------------------


@check
def gather_for_metrics_returns_exactly_the_dataset_in_order() -> None:
    for split, dispatch in ((False, False), (True, False), (False, True)):
        reset_state()
        world = dist.get_world_size()
        config = DataLoaderConfiguration(split_batches=split, dispatch_batches=dispatch)
        acc = Accelerator(dataloader_config=config)
        n = 10 if world == 3 else 11  # not divisible by the number of processes
        batch = 3 * world if split else 3
        loader = acc.prepare(DataLoader(torch.arange(n), batch_size=batch))
        tensors, pairs, objects = [], [], []
        for b in loader:
            tensors.append(acc.gather_for_metrics(b))
            _, c = acc.gather_for_metrics((b, b * 10))
            pairs.append(c)
            objects += acc.gather_for_metrics([f"s{int(i)}" for i in b], use_gather_object=True)
        assert torch.cat(tensors).tolist() == list(range(n)), (split, dispatch, tensors)
        assert torch.cat(pairs).tolist() == [10 * i for i in range(n)]
        assert objects == [f"s{i}" for i in range(n)], objects


@check
def gather_reduce_and_pad_through_the_accelerator() -> None:
    acc = Accelerator()
    rank, world = acc.process_index, acc.num_processes
    assert acc.gather(torch.tensor([rank, rank])).tolist() == [
        r for r in range(world) for _ in "ab"
    ]
    total = acc.reduce(torch.tensor([float(rank)]), reduction="sum")
    assert total.item() == sum(range(world))
    mean = acc.reduce(torch.tensor([float(rank)]), reduction="mean")
    assert mean.item() == sum(range(world)) / world
    padded = acc.pad_across_processes(torch.ones(rank + 1, 2), dim=0, pad_index=-1)
    assert padded.shape == (world, 2) and padded[rank + 1 :].eq(-1).all()
    assert acc.gather(padded).shape == (world * world, 2)


# --- process control ---------------------------------------------------------------------------


@check
def print_and_process_decorators() -> None:
    acc = Accelerator()
    rank, world = acc.process_index, acc.num_processes
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        acc.print("from the main process")
    assert out.getvalue() == ("from the main process\n" if rank == 0 else "")

    @acc.on_main_process
    def main() -> int:
        return rank

    @acc.on_last_process
    def last() -> int:
        return rank

    @acc.on_process(process_index=1)
    def second() -> int:
        return rank

    assert main() == (0 if rank == 0 else None)
    assert last() == (rank if rank == world - 1 else None)
    assert second() == (1 if rank == 1 else None)


@check
def main_process_first_and_wait_for_everyone() -> None:
    acc = Accelerator()
    with acc.main_process_first():
        if acc.is_main_process:
            time.sleep(0.2)
        stamp = time.time()
    stamps = all_ranks(stamp)
    assert all(s >= stamps[0] for s in stamps[1:]), stamps
    acc.wait_for_everyone()  # line the ranks up, then measure how long the barrier holds
    start = time.time()
    if acc.is_main_process:
        time.sleep(1.0)
    acc.wait_for_everyone()
    assert time.time() - start >= 0.6  # ranks leave the first barrier within a few ms


@check
def split_between_processes_gives_each_rank_its_share() -> None:
    acc = Accelerator()
    rank, world = acc.process_index, acc.num_processes
    items = list(range(2 * world + 1))
    with acc.split_between_processes(items) as mine:
        shares = all_ranks(list(mine))
    assert [x for share in shares for x in share] == items
    assert len(shares[0]) == 3 and all(len(s) == 2 for s in shares[1:])
    with acc.split_between_processes(items, apply_padding=True) as mine:
        assert len(mine) == 3
    del rank
