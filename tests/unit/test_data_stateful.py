"""use_stateful_dataloader=True in one process: the loaders are torchdata StatefulDataLoaders,
their state is torchdata's, and a loaded state continues exactly where it was taken."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from nbaccel import Accelerator, DataLoaderConfiguration
from nbaccel.data import (
    DataLoaderDispatcher,
    DataLoaderShard,
    SkipDataLoader,
    prepare_data_loader,
    stateful,
)
from nbaccel.data_loader import DataLoaderStateMixin
from nbaccel.testing import reset_state

needs_torchdata = pytest.mark.skipif(
    importlib.util.find_spec("torchdata") is None, reason="needs torchdata (pip install torchdata)"
)
pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")


def _stateful_data_loader() -> type:
    # torchdata is optional: the tests that need it skip without it
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader


def ids(batches: list[Any]) -> list[list[int]]:
    return [batch.tolist() for batch in batches]


def shuffled(num_workers: int = 0, n: int = 30) -> DataLoader:
    return DataLoader(list(range(n)), batch_size=4, shuffle=True, num_workers=num_workers)


def prepared(loader: DataLoader, dispatch: bool = False, seed: int = 5) -> Any:
    return prepare_data_loader(
        loader,
        num_processes=1,
        process_index=0,
        dispatch_batches=dispatch,
        data_seed=seed,
        use_stateful_dataloader=True,
    )


@needs_torchdata
def test_accelerate_constructors_build_stateful_data_loaders() -> None:
    stateful_data_loader = _stateful_data_loader()
    shard = DataLoaderShard(list(range(16)), batch_size=4, use_stateful_dataloader=True)
    dispatcher = DataLoaderDispatcher(range(16), batch_size=4, use_stateful_dataloader=True)
    skipping = SkipDataLoader(range(16), batch_size=4, skip_batches=2, use_stateful_dataloader=True)
    for loader, own in ((shard, DataLoaderShard), (dispatcher, DataLoaderDispatcher)):
        assert isinstance(loader, own) and isinstance(loader, DataLoaderStateMixin)
        assert isinstance(loader, stateful_data_loader) and loader.use_stateful_dataloader
        assert isinstance(loader.base_dataloader, stateful_data_loader)
        assert ids(list(loader)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    assert isinstance(skipping, SkipDataLoader) and isinstance(skipping, stateful_data_loader)
    assert ids(list(skipping)) == [[8, 9, 10, 11], [12, 13, 14, 15]]
    plain = DataLoaderShard(list(range(16)), batch_size=4)
    assert not isinstance(plain, stateful_data_loader) and not plain.use_stateful_dataloader


@needs_torchdata
@pytest.mark.parametrize("dispatch", [False, True], ids=["shard", "dispatch"])
def test_accelerator_prepares_stateful_data_loaders(dispatch: bool) -> None:
    config = DataLoaderConfiguration(use_stateful_dataloader=True, dispatch_batches=dispatch)
    acc = Accelerator(dataloader_config=config)
    train, valid = acc.prepare(shuffled(), DataLoader(list(range(6)), batch_size=2))
    for loader in (train, valid):
        assert isinstance(loader, _stateful_data_loader())
        assert isinstance(loader, DataLoaderDispatcher if dispatch else DataLoaderShard)
        assert loader in acc._dataloaders


def test_without_torchdata_the_option_is_an_import_error_naming_the_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "torchdata", None)  # what an absent package imports as
    monkeypatch.setitem(sys.modules, "torchdata.stateful_dataloader", None)
    monkeypatch.setattr(stateful, "_CLASSES", {})
    with pytest.raises(ImportError, match="pip install torchdata"):
        DataLoaderShard(list(range(8)), batch_size=4, use_stateful_dataloader=True)
    with pytest.raises(ImportError, match="pip install torchdata"):
        prepared(shuffled())
    assert list(prepare_data_loader(shuffled(), num_processes=1, process_index=0))  # the default


@needs_torchdata
@pytest.mark.parametrize("num_workers", [0, 2])
def test_state_is_torchdatas_own(num_workers: int) -> None:
    """Where the order depends on nothing nbaccel seeds, the state is exactly the one a
    StatefulDataLoader over the same data has after the same batches."""
    stateful_data_loader = _stateful_data_loader()

    def generator() -> torch.Generator:
        return torch.Generator().manual_seed(42)

    kwargs: dict[str, Any] = {"batch_size": 4, "num_workers": num_workers}
    reference = stateful_data_loader(list(range(40)), generator=generator(), **kwargs)
    makers = (DataLoaderShard, DataLoaderDispatcher, SkipDataLoader)
    ours: dict[str, Any] = {"use_stateful_dataloader": True, **kwargs}
    loaders = [make(list(range(40)), generator=generator(), **ours) for make in makers]
    for loader in [reference, *loaders]:
        iterator = iter(loader)
        for _ in range(3):
            next(iterator)
    expected = reference.state_dict()
    assert "_snapshot" in expected if num_workers else "_num_yielded" in expected
    for loader in loaders:
        assert loader.state_dict() == expected, type(loader).__name__
    resumed_reference = stateful_data_loader(list(range(40)), generator=generator(), **kwargs)
    resumed_reference.load_state_dict(expected)
    rest = ids(list(resumed_reference))
    assert rest[0] == [12, 13, 14, 15] and len(rest) == 7
    for make in makers:
        loader = make(list(range(40)), generator=generator(), **ours)
        loader.load_state_dict(expected)
        assert ids(list(loader)) == rest, make.__name__


@needs_torchdata
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("dispatch", [False, True], ids=["shard", "dispatch"])
def test_a_fresh_loader_continues_mid_epoch_in_the_same_order(
    num_workers: int, dispatch: bool
) -> None:
    """Epoch 0 whole, 3 batches of epoch 1, the state; a loader built with another seed loads
    it and yields the rest of epoch 1 and then epoch 2 exactly as the first one does."""
    first = prepared(shuffled(num_workers), dispatch, seed=5)
    epoch0 = ids(list(first))
    iterator = iter(first)
    head = ids([next(iterator) for _ in range(3)])
    state = first.state_dict()
    tail, epoch2 = ids(list(iterator)), ids(list(first))
    assert sorted(i for batch in head + tail for i in batch) == list(range(30))
    assert head + tail != epoch0
    assert (state["epoch"], state["seed"], state["_iterator_finished"]) == (1, 5, False)
    assert state["batches_yielded"] == 3
    torch.manual_seed(123)
    second = prepared(shuffled(num_workers), dispatch, seed=77)
    second.load_state_dict(state)
    assert second.state_dict()["seed"] == 5
    assert ids(list(second)) == tail
    assert ids(list(second)) == epoch2


@needs_torchdata
def test_a_state_taken_at_the_last_batch_resumes_with_the_next_epoch() -> None:
    first = prepared(shuffled())
    reference = prepared(shuffled())
    list(reference)
    epoch1 = ids(list(reference))
    for _ in first:
        state = first.state_dict()  # the last one is taken while the last batch is in use
    assert state["_iterator_finished"] and state["epoch"] == 1
    second = prepared(shuffled(), seed=9)
    second.load_state_dict(state)
    assert second.epoch == 1 and ids(list(second)) == epoch1


@needs_torchdata
def test_nbaccels_own_state_loads_into_a_stateful_loader() -> None:
    reference = prepared(shuffled())
    list(reference)
    epoch1 = ids(list(reference))
    loader = prepared(shuffled(), seed=1)
    loader.load_state_dict({"epoch": 1, "batches_yielded": 2, "seed": 5})
    assert ids(list(loader)) == epoch1[2:]


@needs_torchdata
@pytest.mark.parametrize("num_workers", [0, 2])
def test_asking_for_the_state_first_changes_nothing(num_workers: int) -> None:
    """state_dict() before a pass (a save before training) neither draws from the global
    generator nor changes the batches; iterating draws nothing from it either."""
    expected = ids(list(prepared(shuffled(num_workers))))
    loader = prepared(shuffled(num_workers))
    before = torch.get_rng_state()
    state = loader.state_dict()
    assert state["_iterator_finished"] is False and state["epoch"] == 0
    assert ids(list(loader)) == expected
    assert torch.equal(torch.get_rng_state(), before)


def _build(tmp_path: Path, seed: int) -> tuple[Accelerator, Any, Any, nn.Module]:
    reset_state()
    acc = Accelerator(dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    torch.manual_seed(seed)
    model = nn.Linear(2, 1)
    data = TensorDataset(torch.arange(24.0))
    train = DataLoader(data, batch_size=4, shuffle=True)
    valid = DataLoader(data, batch_size=6)
    model, train, valid = acc.prepare(model, train, valid)
    return acc, train, valid, model


@needs_torchdata
def test_save_state_writes_torchdatas_state_and_load_state_continues(tmp_path: Path) -> None:
    acc, train, valid, _ = _build(tmp_path, 0)
    iterator = iter(train)
    for _ in range(2):
        next(iterator)
    next(iter(valid))
    acc.save_state(tmp_path / "ckpt")
    rest = [b[0].tolist() for b in iterator]
    files = sorted(p.name for p in (tmp_path / "ckpt").iterdir() if p.name.startswith("dl_"))
    assert files == ["dl_state_dict.bin", "dl_state_dict_1.bin"]
    saved = torch.load(tmp_path / "ckpt" / "dl_state_dict.bin", weights_only=True)
    assert saved["_num_yielded"] == 2 and saved["_iterator_finished"] is False
    assert saved["epoch"] == 0 and "seed" in saved
    valid_state = torch.load(tmp_path / "ckpt" / "dl_state_dict_1.bin", weights_only=True)
    assert valid_state["_num_yielded"] == 1 and "epoch" not in valid_state  # sequential
    acc2, train2, valid2, _ = _build(tmp_path, 1)
    acc2.load_state(tmp_path / "ckpt")
    assert [b[0].tolist() for b in train2] == rest
    assert [b[0].tolist() for b in valid2] == [[6.0, 7.0, 8.0, 9.0, 10.0, 11.0]] + [
        [float(v) for v in range(i, i + 6)] for i in (12, 18)
    ]


@needs_torchdata
def test_accelerates_loader_reads_the_file_and_nbaccel_reads_accelerates_state(
    tmp_path: Path,
) -> None:
    """Accelerate's dl_state_dict.bin holds its loader's state_dict(): each side loads the
    other's (a sequential loader: the order is the dataset's)."""
    accelerate_data_loader = pytest.importorskip("accelerate.data_loader")
    acc, _, valid, _ = _build(tmp_path, 0)
    iterator = iter(valid)
    next(iterator)
    acc.save_state(tmp_path / "ckpt")
    state = torch.load(tmp_path / "ckpt" / "dl_state_dict_1.bin", weights_only=True)
    theirs = accelerate_data_loader.DataLoaderShard(
        TensorDataset(torch.arange(24.0)), batch_size=6, use_stateful_dataloader=True
    )
    theirs.load_state_dict(state)
    assert [b[0].tolist() for b in theirs] == [b[0].tolist() for b in iterator]
    theirs = accelerate_data_loader.DataLoaderShard(
        TensorDataset(torch.arange(24.0)), batch_size=6, use_stateful_dataloader=True
    )
    their_iterator = iter(theirs)
    for _ in range(3):
        next(their_iterator)
    ours = DataLoaderShard(
        TensorDataset(torch.arange(24.0)), batch_size=6, use_stateful_dataloader=True
    )
    ours.load_state_dict(theirs.state_dict())
    assert [b[0].tolist() for b in ours] == [[18.0, 19.0, 20.0, 21.0, 22.0, 23.0]]


@needs_torchdata
def test_a_loader_the_checkpoint_does_not_hold_is_left_as_it_is(tmp_path: Path) -> None:
    reset_state()
    acc = Accelerator(dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    train = acc.prepare(shuffled())
    next(iter(train))
    acc.save_state(tmp_path / "ckpt")
    extra = acc.prepare(DataLoader(list(range(8)), batch_size=2))
    acc.load_state(tmp_path / "ckpt")  # dl_state_dict_1.bin was never written
    assert ids(list(extra)) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert len(list(train)) == len(train) - 1
