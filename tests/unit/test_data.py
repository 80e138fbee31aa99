"""Single-process tests of nbaccel.data: sharding arithmetic, seeding, skipping, state."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler

from nbaccel import GradientState
from nbaccel.data import (
    BatchSamplerShard,
    DataLoaderConfiguration,
    DataLoaderDispatcher,
    DataLoaderShard,
    IterableDatasetShard,
    SeedableRandomSampler,
    SkipBatchSampler,
    prepare_data_loader,
    skip_first_batches,
)


class Stream(IterableDataset):
    """0..n-1 as an iterable dataset (optionally sized)."""

    def __init__(self, n: int, sized: bool = True) -> None:
        self.n, self.sized = n, sized

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self) -> int:
        if not self.sized:
            raise TypeError("no length")
        return self.n


def items(n: int) -> Any:
    """0..n-1 as a map-style dataset."""
    return range(n)


def batches(loader: Any) -> list[list[int]]:
    return [b.tolist() for b in loader]


def shards(length, batch_size, n, split=False, even=True, drop_last=False):
    base = BatchSampler(SequentialSampler(range(length)), batch_size, drop_last)
    return [BatchSamplerShard(base, n, i, split, even) for i in range(n)]


# --- BatchSamplerShard arithmetic -------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "even", "drop_last", "expected"),
    [
        (2, True, False, [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [10, 0]]]),
        (2, False, False, [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [10]]]),
        (2, True, True, [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]),
        (3, True, False, [[[0, 1], [6, 7]], [[2, 3], [8, 9]], [[4, 5], [10, 0]]]),
        (3, False, False, [[[0, 1], [6, 7]], [[2, 3], [8, 9]], [[4, 5], [10]]]),
        (3, True, True, [[[0, 1], [6, 7]], [[2, 3], [8, 9]], [[4, 5]]]),
    ],
)
def test_batch_sampler_shard_whole_batches(n, even, drop_last, expected) -> None:
    samplers = shards(11, 2, n, even=even, drop_last=drop_last)
    got = [list(s) for s in samplers]
    if (n, drop_last) == (3, True):  # 5 full batches, the incomplete round is dropped
        expected = [[[0, 1]], [[2, 3]], [[4, 5]]]
    assert got == expected
    assert [len(s) for s in samplers] == [len(b) for b in got]


def test_batch_sampler_shard_counts_duplicates_and_real_samples() -> None:
    samplers = shards(10, 2, 3)  # batches 0..4; last round: [6,7] [8,9] + a repeat
    got = [list(s) for s in samplers]
    assert got[2] == [[4, 5], [0, 1]]
    assert all(s.duplicated_samples == 2 and s.last_batch_real_samples == 4 for s in samplers)
    samplers = shards(9, 2, 3)  # last round: [6,7] [8]+[0] [1,2]
    got = [list(s) for s in samplers]
    assert [g[-1] for g in got] == [[6, 7], [8, 0], [1, 2]]
    assert all(s.duplicated_samples == 3 and s.last_batch_real_samples == 3 for s in samplers)
    samplers = shards(12, 2, 3)
    assert [s.duplicated_samples for s in samplers if list(s)] == [0, 0, 0]


@pytest.mark.parametrize(
    ("n", "length", "even", "expected"),
    [
        (2, 10, True, [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [0, 1]]]),
        (2, 9, False, [[[0, 1], [4, 5], [8]], [[2, 3], [6, 7]]]),
        (3, 11, True, [[[0, 1], [6, 7]], [[2, 3], [8, 9]], [[4, 5], [10, 0]]]),
        (3, 8, False, [[[0, 1], [6, 7]], [[2, 3]], [[4, 5]]]),
    ],
)
def test_batch_sampler_shard_split_batches(n, length, even, expected) -> None:
    samplers = shards(length, 2 * n, n, split=True, even=even)
    got = [list(s) for s in samplers]
    assert got == expected
    assert [len(s) for s in samplers] == [len(b) for b in got]


def test_split_batches_needs_a_divisible_batch_size() -> None:
    with pytest.raises(ValueError, match="not a round multiple of 3"):
        shards(10, 4, 3, split=True)
    with pytest.raises(ValueError, match="not a round multiple of 3"):
        prepare_data_loader(DataLoader(items(10), batch_size=4), None, 3, 0, split_batches=True)


def test_skip_batch_sampler() -> None:
    base = BatchSampler(SequentialSampler(range(7)), 2, False)
    skipper = SkipBatchSampler(base, 2)
    assert list(skipper) == [[4, 5], [6]] and len(skipper) == 2


# --- IterableDatasetShard ---------------------------------------------------------------------
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("n", [2, 3])
def test_iterable_dataset_shard(n: int, drop_last: bool) -> None:
    parts = [list(IterableDatasetShard(Stream(11), 2, drop_last, n, i)) for i in range(n)]
    size = 2 * n
    rounds = 11 // size if drop_last else -(-11 // size)
    assert all(len(p) == rounds * 2 for p in parts)
    for r in range(rounds):
        joined = [x for p in parts for x in p[2 * r : 2 * r + 2]]
        if r < 11 // size:
            assert joined == list(range(r * size, (r + 1) * size))
        else:  # completed with samples from the start
            real = list(range(r * size, 11))
            assert joined == real + list(range(size - len(real)))
    shard = IterableDatasetShard(Stream(11), 2, drop_last, n, 0)
    assert len(shard) == rounds * 2


# --- prepare_data_loader on one process -------------------------------------------------------
def test_one_process_prepare_is_a_pass_through() -> None:
    data: Any = torch.arange(23).float()
    loader = DataLoader(data, batch_size=4)
    prepared = prepare_data_loader(loader, num_processes=1, process_index=0)
    assert isinstance(prepared, DataLoaderShard)
    assert [b.tolist() for b in prepared] == [b.tolist() for b in loader]
    assert len(prepared) == len(loader) == 6 and prepared.dataset is data
    assert prepared.batch_size == 4 and prepared.total_batch_size == 4
    assert prepared.total_dataset_length == 23


def test_sizes_with_several_processes() -> None:
    loader = DataLoader(items(23), batch_size=4)
    whole = prepare_data_loader(loader, num_processes=3, process_index=2)
    assert (whole.batch_size, whole.total_batch_size, len(whole)) == (4, 12, 2)
    split = prepare_data_loader(loader, num_processes=2, process_index=1, split_batches=True)
    assert (split.batch_size, split.total_batch_size, len(split)) == (2, 4, 6)
    uneven = prepare_data_loader(loader, num_processes=4, process_index=3, even_batches=False)
    assert len(uneven) == 1 and len(batches(uneven)) == 1


def test_shuffle_is_seeded_per_epoch_and_never_draws_global_rng() -> None:
    loader = DataLoader(items(40), batch_size=5, shuffle=True)
    prepared = prepare_data_loader(loader, num_processes=1, process_index=0, data_seed=7)
    twin = prepare_data_loader(loader, num_processes=1, process_index=0, data_seed=7)
    torch_state, py_state = torch.get_rng_state(), random.getstate()
    first, second = batches(prepared), batches(prepared)
    assert torch.equal(torch_state, torch.get_rng_state()) and py_state == random.getstate()
    assert first != second and sorted(x for b in first for x in b) == list(range(40))
    assert batches(twin) == first and batches(twin) == second and twin.epoch == 2
    twin.set_epoch(1)
    assert batches(twin) == second
    other = prepare_data_loader(loader, num_processes=1, process_index=0, data_seed=8)
    assert batches(other) != first


def test_seedable_random_sampler_alone() -> None:
    sampler = SeedableRandomSampler(range(20), data_seed=3)
    state = torch.get_rng_state()
    a, b = list(sampler), list(sampler)
    sampler.set_epoch(0)
    assert list(sampler) == a and a != b and torch.equal(state, torch.get_rng_state())


def test_end_of_dataloader_and_gradient_state() -> None:
    prepared = prepare_data_loader(DataLoader(items(10), batch_size=3), None, 1, 0)
    gradient_state = GradientState()
    seen = []
    for _ in prepared:
        assert gradient_state.active_dataloader is prepared
        seen.append((prepared.end_of_dataloader, gradient_state.end_of_dataloader))
    assert seen == [(False, False)] * 3 + [(True, True)]
    assert prepared.remainder == 1 and gradient_state.active_dataloader is None


def test_remainder_on_two_processes() -> None:
    loader = DataLoader(items(10), batch_size=2)
    for index in (0, 1, 2):
        prepared = prepare_data_loader(loader, num_processes=3, process_index=index)
        for _ in prepared:
            assert prepared.remainder == (4 if prepared.end_of_dataloader else -1)


def test_put_on_device_moves_nested_batches() -> None:
    data: Any = [{"x": torch.tensor([i]), "y": (torch.tensor(i), "s")} for i in range(4)]
    prepared = prepare_data_loader(DataLoader(data, batch_size=2), "meta", 1, 0, put_on_device=True)
    batch = next(iter(prepared))
    assert batch["x"].device.type == "meta" and batch["y"][0].device.type == "meta"
    assert list(batch["y"][1]) == ["s", "s"] and prepared.device == torch.device("meta")


def test_iterable_dataset_loader_on_one_process() -> None:
    prepared = prepare_data_loader(DataLoader(Stream(7), batch_size=3), None, 1, 0)
    assert isinstance(prepared, DataLoaderDispatcher)  # iterable datasets dispatch by default
    assert batches(prepared) == [[0, 1, 2], [3, 4, 5], [6]] and len(prepared) == 3
    sharded = prepare_data_loader(
        DataLoader(Stream(7), batch_size=2), None, 2, 1, dispatch_batches=False
    )
    assert batches(sharded) == [[2, 3], [6, 0]] and len(sharded) == 2
    assert sharded.remainder == 3


def test_batch_size_none_loaders() -> None:
    prepared = prepare_data_loader(DataLoader(items(5), batch_size=None), None, 2, 1)
    assert [int(x) for x in prepared] == [1, 3, 0]


# --- skip_first_batches -----------------------------------------------------------------------
def test_skip_first_batches_on_a_plain_loader_keeps_the_shuffle() -> None:
    loader = DataLoader(items(30), batch_size=4, shuffle=True)
    state = torch.get_rng_state()
    full = batches(loader)
    after_full = torch.get_rng_state()
    torch.set_rng_state(state)
    skipped = skip_first_batches(loader, 3)
    assert batches(skipped) == full[3:] and len(skipped) == len(full) - 3
    assert torch.equal(after_full, torch.get_rng_state())  # drew exactly what the loader draws
    assert batches(skip_first_batches(DataLoader(Stream(9), batch_size=2), 3)) == [[6, 7], [8]]


def test_skip_first_batches_on_a_prepared_loader_resumes_the_epoch() -> None:
    loader = DataLoader(items(30), batch_size=4, shuffle=True)
    run = prepare_data_loader(loader, None, 2, 1, data_seed=5)
    batches(run)
    epoch1 = batches(run)
    resumed = prepare_data_loader(loader, None, 2, 1, data_seed=5)
    resumed.set_epoch(1)
    state = torch.get_rng_state()
    skipper = skip_first_batches(resumed, 2)
    assert batches(skipper) == epoch1[2:] and len(skipper) == len(epoch1) - 2
    assert torch.equal(state, torch.get_rng_state())
    assert resumed.epoch == 2 and batches(resumed) == batches(run)


def test_state_dict_restores_the_position() -> None:
    loader = DataLoader(items(50), batch_size=4, shuffle=True)
    first = prepare_data_loader(loader, None, 1, 0, use_stateful_dataloader=True)
    batches(first)
    expected = batches(first)
    seen = []
    for batch in first:
        seen.append(batch.tolist())
        if len(seen) == 5:
            state = first.state_dict()
            break
    assert state["epoch"] == 2 and state["batches_yielded"] == 5
    fresh = prepare_data_loader(DataLoader(items(50), batch_size=4, shuffle=True), None, 1, 0)
    fresh.load_state_dict(state)
    rest = batches(fresh)
    reference = prepare_data_loader(loader, None, 1, 0, data_seed=state["seed"])
    reference.set_epoch(2)
    assert seen + rest == batches(reference) and len(rest) == len(expected) - 5
    assert fresh.state_dict() == {"epoch": 3, "batches_yielded": 0, "seed": state["seed"]}
    with pytest.raises(ValueError, match="missing"):
        fresh.load_state_dict({"epoch": 1})


# --- validation -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"split_batches": 1}, TypeError, "split_batches"),
        ({"dispatch_batches": "yes"}, TypeError, "dispatch_batches"),
        ({"data_seed": -1}, ValueError, "data_seed"),
        ({"data_seed": 1.5}, TypeError, "data_seed"),
        ({"even_batches": None}, TypeError, "even_batches"),
    ],
)
def test_configuration_validation(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        DataLoaderConfiguration(**kwargs)
    assert DataLoaderConfiguration(data_seed=3).to_kwargs()["data_seed"] == 3


def test_prepare_validation() -> None:
    loader = DataLoader(items(4), batch_size=2)
    with pytest.raises(TypeError, match=r"expects a torch\.utils\.data\.DataLoader"):
        prepare_data_loader([1, 2], None, 1, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="out of range"):
        prepare_data_loader(loader, None, 2, 2)
    with pytest.raises(ValueError, match="already prepared"):
        prepare_data_loader(prepare_data_loader(loader, None, 1, 0), None, 1, 0)
    with pytest.raises(ValueError, match="rng_types"):
        prepare_data_loader(loader, None, 1, 0, rng_types=["dice"])
    with pytest.raises(ValueError, match="must not be negative"):
        skip_first_batches(loader, -1)
