"""Rank-side checks of nbaccel.data on one real gloo process group (run by every rank)."""

from __future__ import annotations

import random
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import BatchSampler, DataLoader, IterableDataset

from nbaccel import GradientState, PartialState, set_seed
from nbaccel.data import DataLoaderDispatcher, prepare_data_loader, skip_first_batches

CHECKS: list[Callable[[], None]] = []


def check(function: Callable[[], None]) -> Callable[[], None]:
    """Register a check; checks run in the order they are defined, on every rank."""
    CHECKS.append(function)
    return function


def gather(value: Any) -> list[Any]:
    """``value`` from every rank, in rank order."""
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def world() -> tuple[int, int]:
    state = PartialState()
    return state.num_processes, state.process_index


class Stream(IterableDataset):
    """0..n-1 as a sized iterable dataset."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self) -> int:
        return self.n


def items(n: int) -> Any:
    """0..n-1 as a map-style dataset."""
    return range(n)


def flat(batches: list[Any]) -> list[int]:
    return [int(x) for b in batches for x in b]


def interleave(per_rank: list[list[list[int]]]) -> list[int]:
    """Global order from whole-batch shards: step by step, rank by rank."""
    out: list[int] = []
    for step in range(max(len(r) for r in per_rank)):
        for rank_batches in per_rank:
            if step < len(rank_batches):
                out.extend(rank_batches[step])
    return out


def epoch_batches(loader: Any) -> list[list[int]]:
    return [[int(x) for x in b] for b in loader]


@check
def shards_are_disjoint_and_cover_the_dataset() -> None:
    n, _ = world()
    loader = DataLoader(items(23), batch_size=2, shuffle=True)
    prepared = prepare_data_loader(loader, even_batches=False)
    everything = gather(flat(epoch_batches(prepared)))
    assert sorted(x for part in everything for x in part) == list(range(23)), everything
    for a in range(n):
        for b in range(a + 1, n):
            assert not set(everything[a]) & set(everything[b])


@check
def shuffle_is_identical_across_ranks_and_differs_per_epoch() -> None:
    n, rank = world()
    set_seed(100 + rank)  # different global seeds: only the broadcast data seed can agree
    loader = DataLoader(items(n * 3 * 4), batch_size=3, shuffle=True)
    prepared = prepare_data_loader(loader)
    torch_state, py_state = torch.get_rng_state(), random.getstate()
    orders = []
    for _ in range(3):
        order = interleave(gather(epoch_batches(prepared)))
        assert sorted(order) == list(range(n * 12)), order  # the ranks agree on one permutation
        orders.append(order)
    assert torch.equal(torch_state, torch.get_rng_state()) and py_state == random.getstate()
    assert len({tuple(o) for o in orders}) == 3, "every epoch must shuffle differently"
    assert len(set(gather(prepared.state_dict()["seed"]))) == 1


@check
def split_batches_cut_each_batch() -> None:
    n, rank = world()
    loader = DataLoader(items(4 * n * 2), batch_size=2 * n)
    prepared = prepare_data_loader(loader, split_batches=True)
    assert prepared.batch_size == 2 and prepared.total_batch_size == 2 * n
    mine = epoch_batches(prepared)
    assert len(prepared) == len(mine) == 4
    expected = [b.tolist()[2 * rank : 2 * rank + 2] for b in loader]
    assert mine == expected, (mine, expected)


@check
def even_batches_pad_and_report_the_remainder() -> None:
    n, _ = world()
    length = 10 if n == 3 else 11  # not divisible by 2 * n
    loader = DataLoader(items(length), batch_size=2)
    prepared = prepare_data_loader(loader, even_batches=True)
    mine = epoch_batches(prepared)
    lengths = gather(len(mine))
    assert len(set(lengths)) == 1 and lengths[0] == len(prepared)
    per_rank = gather(mine)
    last_step = [x for r in per_rank for x in r[-1]]
    remainder = prepared.remainder
    assert remainder == length % (2 * n), (remainder, last_step)
    assert last_step[:remainder] == list(range(length - remainder, length))
    duplicated = sum(len(b) for r in per_rank for b in r) - length
    assert duplicated == 2 * n - remainder
    assert sorted({x for r in per_rank for x in flat(r)}) == list(range(length))


@check
def uneven_batches_without_even_batches() -> None:
    n, rank = world()
    loader = DataLoader(items(2 * n + 3), batch_size=2)  # n + 2 batches
    prepared = prepare_data_loader(loader, even_batches=False)
    mine = epoch_batches(prepared)
    assert len(mine) == len(prepared) == (2 if rank < 2 else 1)
    everything = gather(flat(mine))
    assert sorted(x for part in everything for x in part) == list(range(2 * n + 3))


@check
def dispatch_batches_send_each_rank_its_slice() -> None:
    n, _ = world()
    length = 4 * n + 1
    numbers: Any = torch.arange(length)
    loader = DataLoader(numbers, batch_size=2, shuffle=True)
    prepared = prepare_data_loader(loader, dispatch_batches=True, data_seed=11)
    assert isinstance(prepared, DataLoaderDispatcher)
    mine = epoch_batches(prepared)
    assert len(mine) == len(prepared) == 3
    per_rank = gather(mine)
    last_step = [x for r in per_rank for x in r[-1]]
    assert prepared.remainder == 1 and len(last_step) == n
    real = interleave([r[:-1] for r in per_rank]) + last_step[:1]
    assert sorted(real) == list(range(length))
    # the same shuffle as a plain sharded loader: process 0 iterates the seeded sampler
    reference = prepare_data_loader(loader, num_processes=1, process_index=0, data_seed=11)
    assert real == flat(epoch_batches(reference))


@check
def iterable_datasets_are_sharded() -> None:
    n, _ = world()
    for dispatch in (None, False):
        loader = DataLoader(Stream(11), batch_size=2)
        prepared = prepare_data_loader(loader, dispatch_batches=dispatch)
        mine = epoch_batches(prepared)
        lengths = gather(len(mine))
        assert len(set(lengths)) == 1 and lengths[0] == len(prepared), lengths
        per_rank = gather(mine)
        order = interleave(per_rank)
        remainder = prepared.remainder
        assert order[: len(order) - (2 * n - remainder)] == list(range(11)), (dispatch, order)
    dropped = prepare_data_loader(
        DataLoader(Stream(11), batch_size=2, drop_last=True), dispatch_batches=False
    )
    assert interleave(gather(epoch_batches(dropped))) == list(range(11 // (2 * n) * 2 * n))


@check
def len_is_the_number_of_batches_of_this_process() -> None:
    n, _ = world()
    for length, size, split, even, drop in [
        (23, 2, False, True, False),
        (23, 2, False, False, False),
        (23, 2, False, True, True),
        (23, 2 * n, True, True, False),
        (23, 2 * n, True, False, False),
    ]:
        loader = DataLoader(items(length), batch_size=size, drop_last=drop)
        prepared = prepare_data_loader(loader, split_batches=split, even_batches=even)
        assert len(prepared) == len(epoch_batches(prepared)), (length, size, split, even, drop)


@check
def skip_first_batches_resumes_with_the_remaining_batches() -> None:
    set_seed(7)
    loader = DataLoader(items(40), batch_size=2, shuffle=True)
    run = prepare_data_loader(loader)
    epoch_batches(run)
    seen = []
    for batch in run:  # epoch 1, interrupted after 3 batches
        seen.append([int(x) for x in batch])
        if len(seen) == 3:
            break
    run.set_epoch(1)
    full = epoch_batches(run)
    set_seed(7)
    resumed = prepare_data_loader(loader)
    resumed.set_epoch(1)
    state = torch.get_rng_state()
    rest = epoch_batches(skip_first_batches(resumed, 3))
    assert torch.equal(state, torch.get_rng_state())
    assert seen + rest == full and seen == full[:3]
    assert resumed.epoch == 2
    # the same through state_dict / load_state_dict
    run.set_epoch(1)
    iterator: Any = iter(run)
    for _ in range(3):
        next(iterator)
    saved = run.state_dict()
    iterator.close()
    restored = prepare_data_loader(DataLoader(items(40), batch_size=2, shuffle=True))
    restored.load_state_dict(saved)
    assert epoch_batches(restored) == full[3:]


@check
def end_of_dataloader_is_set_on_the_last_batch_only() -> None:
    n, _ = world()
    for dispatch in (False, True):
        prepared = prepare_data_loader(
            DataLoader(items(5 * n + 1), batch_size=2), dispatch_batches=dispatch
        )
        flags = []
        for _ in prepared:
            flags.append((prepared.end_of_dataloader, GradientState().end_of_dataloader))
        assert flags == [(False, False)] * (len(flags) - 1) + [(True, True)], flags
        assert GradientState().active_dataloader is None
        assert len(set(gather(len(flags)))) == 1


@check
def a_users_generator_keeps_its_order_and_is_synchronised() -> None:
    """DataLoader(shuffle=True, generator=g): the ranks share out exactly the batches that the
    unprepared loader with process 0's generator yields, epoch after epoch (Accelerate's
    "generator" rng_type: process 0's generator state at the start of every pass)."""
    n, rank = world()
    size = n * 3 * 4
    mine = torch.Generator().manual_seed(100 + rank)  # only process 0's state may count
    prepared = prepare_data_loader(
        DataLoader(items(size), batch_size=3, shuffle=True, generator=mine), rng_types=["generator"]
    )
    reference = DataLoader(items(size), batch_size=3, shuffle=True)
    reference.generator = reference.sampler.generator = torch.Generator().manual_seed(100)
    for _ in range(2):
        assert interleave(gather(epoch_batches(prepared))) == flat(epoch_batches(reference))
    assert len(set(gather(tuple(mine.get_state().tolist())))) == 1


@check
def rng_types_torch_synchronises_the_global_generator_at_each_pass() -> None:
    _, rank = world()
    for rng_types, agree in ((["torch"], True), (None, False)):
        set_seed(7 + rank)
        prepared = prepare_data_loader(DataLoader(items(8), batch_size=2), rng_types=rng_types)
        for _ in prepared:
            draw = torch.rand(1).item()  # the training step's randomness
            break
        assert (len(set(gather(draw))) == 1) is agree, (rng_types, gather(draw))


@check
def a_batch_sampler_given_as_sampler_is_evened_out() -> None:
    """DataLoader(batch_size=None, sampler=BatchSampler(...)): the dataset receives lists of
    indices; the batches are shared out and the last one completed from the start."""
    n, _ = world()
    length = 4 * n + 3
    dataset = torch.arange(length) * 10  # takes a list of indices
    loader = DataLoader(dataset, batch_size=None, sampler=BatchSampler(range(length), 4, False))
    for dispatch in (False, True):
        prepared = prepare_data_loader(loader, dispatch_batches=dispatch)
        mine = epoch_batches(prepared)
        everything = gather(mine)
        assert len(prepared) == len(mine) == 2 and len({len(b) for b in everything}) == 1
        seen = [x // 10 for x in interleave(everything)]
        if not dispatch:  # whole batches of 4; the last ones completed with 0, 1, 2, ...
            assert all(len(b) == 4 for b in mine), mine
            assert seen == list(range(length)) + list(range(4 * n - 3)), seen
        assert sorted(set(seen)) == list(range(length)) and prepared.remainder == 3


@check
def hugging_face_iterable_with_a_shard_per_rank_is_split_by_its_shards() -> None:
    """As in Accelerate: a ``datasets.IterableDataset`` with at least one shard per rank is
    split with its own ``shard()`` (each rank reads only its files); the ranks together see
    every example exactly once. With fewer shards than ranks, it is sharded by batches."""
    from datasets import IterableDataset as HFIterable  # the test extra installs datasets

    n, _ = world()

    def rows(files: list[int]) -> Any:
        for f in files:
            for i in range(4):
                yield {"x": 10 * f + i}

    for files in (list(range(2 * n)), [0]):
        dataset = HFIterable.from_generator(rows, gen_kwargs={"files": files})
        loader = prepare_data_loader(DataLoader(dataset, batch_size=2), dispatch_batches=False)
        mine = [int(v) for batch in loader for v in batch["x"]]
        everything = gather(mine)
        if len(files) >= n:  # by shards: each rank reads whole files, its own ones
            own = [{v // 10 for v in part} for part in everything]
            assert all(own) and sum(len(f) for f in own) == len(set().union(*own)), own
            assert sorted(v for part in everything for v in part) == sorted(
                10 * f + i for f in files for i in range(4)
            )
        else:  # one file, two ranks: batches dealt out, as for any iterable dataset
            assert loader.dataset.__class__.__name__ == "IterableDatasetShard", loader.dataset


def run_all_checks() -> dict[str, str]:
    """Run every check on this rank: {check name: "ok" or the traceback}."""
    PartialState()
    results: dict[str, str] = {}
    for function in CHECKS:
        try:
            function()
            results[function.__name__] = "ok"
        except Exception:
            results[function.__name__] = traceback.format_exc()
        dist.barrier()
    return results
