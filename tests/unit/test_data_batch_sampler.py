"""A prepared loader's batch sampler is the shard, and the shard's is the user's own, as in
Accelerate (whose test_script checks ``dl.batch_sampler.batch_sampler``); resuming and
skipping still yield exactly the batches left."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import accelerate.data_loader
import accelerate.state
import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

import nbaccel.data_loader
from nbaccel import Accelerator

PREPARES: dict[str, Callable[..., Any]] = {
    "nbaccel": nbaccel.data_loader.prepare_data_loader,
    "accelerate": accelerate.data_loader.prepare_data_loader,
}
SHARDS = {
    "nbaccel": nbaccel.data_loader.BatchSamplerShard,
    "accelerate": accelerate.data_loader.BatchSamplerShard,
}


@pytest.fixture(autouse=True)
def _forget_accelerates_state() -> Iterator[None]:
    accelerate.state.AcceleratorState._reset_state(reset_partial_state=True)
    yield
    accelerate.state.AcceleratorState._reset_state(reset_partial_state=True)


class CustomBatchSampler:
    """Accelerate's test_script's: no torch base class, batches from ``np.array_split``-like
    cuts of ``range(length)``."""

    def __init__(self, length: int, batch_size: int) -> None:
        self.length = length
        self.batch_size = batch_size

    def __len__(self) -> int:
        return math.ceil(self.length / self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        index = list(range(self.length))
        for start in range(0, self.length, self.batch_size):
            yield index[start : start + self.batch_size]


class EveryOtherFirst(BatchSampler):
    """A torch BatchSampler subclass with its own order: even indices, then odd ones."""

    def __iter__(self) -> Iterator[list[int]]:
        order = [*range(0, len(self.sampler), 2), *range(1, len(self.sampler), 2)]  # type: ignore[arg-type]
        for start in range(0, len(order), self.batch_size):
            yield order[start : start + self.batch_size]


def flat(loader: Any) -> list[list[int]]:
    return [batch.tolist() for batch in loader]


@pytest.mark.parametrize("library", sorted(PREPARES))
def test_the_users_batch_sampler_is_under_the_shard_on_two_processes(library: str) -> None:
    custom = CustomBatchSampler(64, batch_size=8)
    loader = DataLoader(range(64), batch_sampler=custom)
    prepared = PREPARES[library](loader, None, num_processes=2, process_index=0)
    assert type(prepared.batch_sampler) is SHARDS[library]
    assert prepared.batch_sampler.batch_sampler is custom
    assert prepared.batch_sampler.even_batches is True
    assert flat(prepared) == [list(range(i, i + 8)) for i in range(0, 64, 16)]


@pytest.mark.parametrize("library", sorted(PREPARES))
def test_a_batch_sampler_given_as_sampler_is_under_the_shard(library: str) -> None:
    batches = BatchSampler(SequentialSampler(range(10)), batch_size=2, drop_last=False)
    loader = DataLoader(torch.arange(10), sampler=batches, batch_size=None)  # takes lists
    prepared = PREPARES[library](loader, None, num_processes=2, process_index=1)
    assert type(prepared.sampler) is SHARDS[library]
    assert prepared.sampler.batch_sampler is batches
    assert flat(prepared) == [[2, 3], [6, 7], [0, 1]]


@pytest.mark.parametrize("library", sorted(PREPARES))
def test_a_shuffled_loaders_shard_holds_the_seedable_sampler(library: str) -> None:
    """Accelerate's check_seedable_sampler_in_batch_sampler_shard."""
    loader = DataLoader(list(range(10)), batch_size=1, shuffle=True)
    prepared = PREPARES[library](loader, None, 2, 0, use_seedable_sampler=True)
    assert type(prepared.batch_sampler.batch_sampler.sampler).__name__ == "SeedableRandomSampler"


def test_the_accelerators_loader_on_one_process_keeps_the_users_class() -> None:
    accelerator = Accelerator(cpu=True)
    custom = CustomBatchSampler(10, batch_size=3)
    prepared = accelerator.prepare(DataLoader(range(10), batch_sampler=custom))
    assert isinstance(prepared.batch_sampler.batch_sampler, CustomBatchSampler)
    assert flat(prepared) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    subclassed = EveryOtherFirst(SequentialSampler(range(7)), batch_size=2, drop_last=False)
    prepared = accelerator.prepare(DataLoader(range(7), batch_sampler=subclassed))
    assert type(prepared.batch_sampler.batch_sampler) is EveryOtherFirst
    assert flat(prepared) == [[0, 2], [4, 6], [1, 3], [5]]


def test_a_resumed_pass_yields_the_rest_then_whole_passes() -> None:
    accelerator = Accelerator(cpu=True)
    custom = CustomBatchSampler(12, batch_size=2)
    prepared = accelerator.prepare(DataLoader(range(12), batch_sampler=custom))
    whole = flat(prepared)
    iterator = iter(prepared)
    seen = [next(iterator).tolist() for _ in range(2)]
    state = prepared.state_dict()
    assert seen == whole[:2] and state["batches_yielded"] == 2

    resumed = accelerator.prepare(DataLoader(range(12), batch_sampler=custom))
    resumed.load_state_dict(state)
    assert resumed.batch_sampler.batch_sampler is custom
    assert flat(resumed) == whole[2:]
    assert flat(resumed) == whole  # the next pass is whole again
    assert len(resumed) == len(whole)


def test_skip_first_batches_leaves_the_original_loader_whole() -> None:
    accelerator = Accelerator(cpu=True)
    custom = CustomBatchSampler(10, batch_size=2)
    prepared = accelerator.prepare(DataLoader(range(10), batch_sampler=custom))
    whole = flat(prepared)
    skipping = accelerator.skip_first_batches(prepared, 3)
    assert flat(skipping) == whole[3:] and len(skipping) == 2
    assert flat(prepared) == whole and len(prepared) == 5
    assert isinstance(skipping.batch_sampler.batch_sampler, CustomBatchSampler)
    # the two loaders used in turn within one pass do not disturb each other
    original, skipped = iter(prepared), iter(skipping)
    assert [next(original).tolist(), next(skipped).tolist(), next(original).tolist()] == [
        whole[0],
        whole[3],
        whole[1],
    ]
    assert [b.tolist() for b in original] == whole[2:]
    assert [b.tolist() for b in skipped] == whole[4:]


def test_a_shard_used_alone_yields_every_batch() -> None:
    shard = nbaccel.data_loader.BatchSamplerShard(CustomBatchSampler(7, 2), 2, 1)
    assert list(shard) == [[2, 3], [6, 0]] and len(shard) == 2
    assert list(shard) == [[2, 3], [6, 0]]  # and again: nothing is left out on a later pass
