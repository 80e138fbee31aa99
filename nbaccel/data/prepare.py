"""prepare_data_loader: turn any DataLoader into one that shards its data across processes."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import sys
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler

from ..enums import RNGType
from ..state import PartialState
from ..validation import is_int
from .configuration import DataLoaderConfiguration
from .dispatch import DataLoaderDispatcher
from .loaders import (
    DataLoaderShard,
    LoaderPosition,
    LoaderSettings,
    PreparedLoaderMixin,
    Reseeder,
    register_loader_builder,
)
from .samplers import BatchSamplerShard, SeedableRandomSampler
from .shards import IterableDatasetShard

__all__ = ["loader_kwargs", "prepare_data_loader"]

_LOADER_ARGS = (
    "num_workers",
    "collate_fn",
    "pin_memory",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory_device",
    "in_order",
)


def loader_kwargs(dataloader: DataLoader) -> dict[str, Any]:
    """The worker, collation and memory settings of ``dataloader``, to build a sibling."""
    accepted = inspect.signature(DataLoader.__init__).parameters
    return {
        n: getattr(dataloader, n) for n in _LOADER_ARGS if n in accepted and hasattr(dataloader, n)
    }


class _FirstOfBatch:
    """Collation for loaders built with ``batch_size=None``: batches of one, unwrapped."""

    def __init__(self, collate_fn: Callable[[Any], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, batch: list[Any]) -> Any:
        return self.collate_fn(batch[0])


def _seeded_sampler(sampler: Any, reseeders: list[Reseeder], seeding: _Seeding) -> Any:
    """``sampler`` with the user's own generator, kept as it is, or else a copy whose
    randomness comes from a generator seeded every epoch."""
    user_generator = getattr(sampler, "generator", None)
    make_seedable = seeding.use_seedable_sampler and isinstance(sampler, RandomSampler)
    if isinstance(user_generator, torch.Generator) and not make_seedable:
        seeding.kept.append(user_generator)  # same order as the user's loader; synchronised
        if hasattr(sampler, "set_epoch"):
            reseeders.append(lambda seed, epoch: sampler.set_epoch(epoch))
        return sampler
    if isinstance(sampler, SeedableRandomSampler):  # the user's own: kept, told the epoch
        reseeders.append(lambda seed, epoch: sampler.set_epoch(epoch))
        return sampler
    if isinstance(sampler, RandomSampler):
        seedable = SeedableRandomSampler(
            sampler.data_source,
            replacement=sampler.replacement,
            num_samples=getattr(sampler, "_num_samples", None),
            data_seed=0,
        )

        def reseed(seed: int, epoch: int) -> None:
            seedable.initial_seed = seed
            seedable.set_epoch(epoch)

        reseeders.append(reseed)
        return seedable
    if hasattr(sampler, "generator"):  # SubsetRandomSampler, WeightedRandomSampler, ...
        sampler = copy.copy(sampler)
        generator = torch.Generator()
        sampler.generator = generator

        def reseed_generator(seed: int, epoch: int) -> None:
            generator.manual_seed((seed + epoch) % 2**63)

        reseeders.append(reseed_generator)
    if hasattr(sampler, "set_epoch"):
        reseeders.append(lambda seed, epoch: sampler.set_epoch(epoch))
    return sampler


@dataclasses.dataclass
class _Seeding:
    """How random samplers are treated, and the user generators kept (to synchronise)."""

    use_seedable_sampler: bool
    kept: list[torch.Generator] = dataclasses.field(default_factory=list)


def _seeded_batch_sampler(
    dataloader: DataLoader, reseeders: list[Reseeder], seeding: _Seeding
) -> tuple[Any, bool]:
    """The loader's batch sampler, reseedable; True when the loader had none (batch_size=None)."""
    if dataloader.batch_sampler is None:
        sampler = dataloader.sampler
        if isinstance(sampler, BatchSampler):  # DataLoader(batch_size=None, sampler=BatchSampler)
            return _seeded_batch_sampler_of(sampler, reseeders, seeding), False
        return BatchSampler(_seeded_sampler(sampler, reseeders, seeding), 1, False), True
    return _seeded_batch_sampler_of(dataloader.batch_sampler, reseeders, seeding), False


def _seeded_batch_sampler_of(
    batch_sampler: Any, reseeders: list[Reseeder], seeding: _Seeding
) -> Any:
    inner = getattr(batch_sampler, "sampler", None)
    if inner is not None:
        seeded = _seeded_sampler(inner, reseeders, seeding)
        if seeded is not inner:  # a copy takes the seeded sampler; the user's stays as it is
            batch_sampler = copy.copy(batch_sampler)
            try:
                setattr(batch_sampler, "sampler", seeded)  # noqa: B010
            except AttributeError:
                pass
    if hasattr(batch_sampler, "set_epoch"):
        reseeders.append(lambda seed, epoch: batch_sampler.set_epoch(epoch))
    return batch_sampler


def _rng_types(rng_types: Any, seeding: _Seeding, dispatch: bool) -> tuple[str, ...]:
    """The generators to synchronise at each pass (Accelerate's rule: not when process 0
    dispatches, and "generator" only when a user's generator is kept)."""
    if dispatch or not rng_types:
        return ()
    names = tuple(str(getattr(r, "value", r)).lower() for r in rng_types)
    return tuple(r for r in names if r != "generator" or seeding.kept)


def _data_seed(dataloader: DataLoader, data_seed: int | None, num_processes: int) -> int:
    """The shuffle seed every process uses: ``data_seed`` or process 0's, broadcast."""
    if data_seed is not None:
        return data_seed
    sampler = getattr(dataloader.batch_sampler, "sampler", dataloader.sampler)
    generator = getattr(sampler, "generator", None)
    if isinstance(generator, torch.Generator):
        seed = generator.initial_seed()
    else:
        seed = torch.initial_seed()
    seed %= 2**63
    if num_processes <= 1 or not (dist.is_available() and dist.is_initialized()):
        return seed
    if dist.get_world_size() <= 1:
        return seed
    device = torch.device("cpu")
    if dist.get_backend() in ("nccl", "xla"):
        device = PartialState().device
    tensor = torch.tensor([seed], dtype=torch.int64, device=device)
    dist.broadcast(tensor, src=0)
    return int(tensor.item())


def _check_args(
    dataloader: Any,
    put_on_device: Any,
    rng_types: Any,
    slice_fn_for_dispatch: Any,
) -> None:
    if not isinstance(dataloader, DataLoader):
        raise TypeError(
            "prepare_data_loader expects a torch.utils.data.DataLoader, "
            f"got {type(dataloader).__name__}."
        )
    if isinstance(dataloader, PreparedLoaderMixin):
        raise ValueError(
            "this data loader was already prepared; pass the original DataLoader instead."
        )
    if not isinstance(put_on_device, bool):
        raise TypeError(f"put_on_device must be True or False, got {put_on_device!r}.")
    if rng_types is not None:
        allowed = {member.value for member in RNGType}
        if isinstance(rng_types, (str, bytes)) or not isinstance(rng_types, Iterable):
            raise TypeError(f"rng_types must be a list of RNG names, got {rng_types!r}.")
        wrong = [r for r in rng_types if str(getattr(r, "value", r)) not in allowed]
        if wrong:
            raise ValueError(f"rng_types has unknown values {wrong}; allowed: {sorted(allowed)}.")
    if slice_fn_for_dispatch is not None and not callable(slice_fn_for_dispatch):
        raise TypeError("slice_fn_for_dispatch must be callable or None.")


def _job(num_processes: int | None, process_index: int | None) -> tuple[int, int]:
    if num_processes is None or process_index is None:
        state = PartialState()
        num_processes = state.num_processes if num_processes is None else num_processes
        process_index = state.process_index if process_index is None else process_index
    if not is_int(num_processes) or num_processes < 1:
        raise ValueError(f"num_processes must be a positive int, got {num_processes!r}.")
    if not is_int(process_index):
        raise TypeError(f"process_index must be an int, got {process_index!r}.")
    if not 0 <= process_index < num_processes:
        raise ValueError(
            f"process_index={process_index} is out of range for {num_processes} processes "
            f"(0..{num_processes - 1})."
        )
    return num_processes, process_index


def prepare_data_loader(
    dataloader: DataLoader,
    device: torch.device | str | None = None,
    num_processes: int | None = None,
    process_index: int | None = None,
    split_batches: bool = False,
    put_on_device: bool = False,
    rng_types: list[str | RNGType] | None = None,
    dispatch_batches: bool | None = None,
    even_batches: bool = True,
    slice_fn_for_dispatch: Callable[[Any, slice, int, int], Any] | None = None,
    use_seedable_sampler: bool = False,
    data_seed: int | None = None,
    non_blocking: bool = False,
    use_stateful_dataloader: bool = False,
) -> DataLoaderShard | DataLoaderDispatcher:
    """Wrap ``dataloader`` so that each process iterates its own share of the data.

    Every process must call this together (process 0's shuffle seed is broadcast). The
    result is a DataLoader: ``len()`` counts this process's batches, ``batch_size`` is this
    process's batch size, ``total_batch_size`` the global one. Unless the user's loader has
    its own generator, iterating it never draws from the global random number generators;
    every complete pass moves to the next epoch.

    Args:
        dataloader: any DataLoader; its sampler or batch sampler is sharded as it is.
        device: where batches go when ``put_on_device`` (default: ``PartialState().device``).
        num_processes: processes sharing the data (default: ``PartialState().num_processes``).
        process_index: this process (default: ``PartialState().process_index``).
        split_batches: split each batch between processes instead of giving whole batches.
        put_on_device: move batches to ``device``.
        rng_types: generators that take process 0's state at the start of every pass
            (``"generator"``: the sampler's own generator, when the user gave one;
            ``"torch"``: torch's global generator; ``"cuda"``, ``"xla"``, ...: the device's).
        dispatch_batches: process 0 reads the data and sends slices (None: True for
            iterable datasets).
        even_batches: every process sees the same number of batches (samples from the start
            of the epoch complete the last global batch).
        slice_fn_for_dispatch: ``fn(batch, slice, process_index, num_processes)`` cutting a
            dispatched global batch.
        use_seedable_sampler: replace a ``RandomSampler`` by a :class:`SeedableRandomSampler`
            even when the user gave it a generator. A sampler with the user's own generator
            (``DataLoader(shuffle=True, generator=g)``) is otherwise kept as it is, so one
            process sees exactly the unprepared loader's order; random samplers without
            one are seeded from ``data_seed`` and the epoch.
        data_seed: shuffle seed (default: process 0's ``torch.initial_seed()``).
        non_blocking: ``non_blocking`` for the device copies.
        use_stateful_dataloader: build the loader as a torchdata ``StatefulDataLoader`` (needs
            ``pip install torchdata``): ``state_dict()`` is torchdata's, recorded as of the
            batches handed out, and a loaded state resumes mid-epoch (see
            :mod:`nbaccel.data.stateful`). Without it ``state_dict()`` is nbaccel's
            ``{"epoch", "batches_yielded", "seed"}``.

    Returns:
        A :class:`DataLoaderShard` or :class:`DataLoaderDispatcher`.
    """
    config = DataLoaderConfiguration(
        split_batches=split_batches,
        dispatch_batches=dispatch_batches,
        even_batches=even_batches,
        use_seedable_sampler=use_seedable_sampler,
        data_seed=data_seed,
        non_blocking=non_blocking,
        use_stateful_dataloader=use_stateful_dataloader,
    )
    _check_args(dataloader, put_on_device, rng_types, slice_fn_for_dispatch)
    n, index = _job(num_processes, process_index)
    if put_on_device and device is None:
        device = PartialState().device
    dataset = dataloader.dataset
    iterable = isinstance(dataset, IterableDataset)
    dispatch = iterable if config.dispatch_batches is None else config.dispatch_batches
    kwargs = loader_kwargs(dataloader)
    if use_stateful_dataloader and hasattr(dataloader, "snapshot_every_n_steps"):
        kwargs["snapshot_every_n_steps"] = dataloader.snapshot_every_n_steps  # a torchdata one
    reseeders: list[Reseeder] = []
    position = LoaderPosition(seed=_data_seed(dataloader, config.data_seed, n))
    seeding = _Seeding(use_seedable_sampler)
    sampler_is_batch_sampler = not iterable and isinstance(dataloader.sampler, BatchSampler)

    if iterable:
        base_size = dataloader.batch_size
        drop_last = dataloader.drop_last
        batch_sampler = None
        dataset_generator = getattr(dataset, "generator", None)
        if isinstance(dataset_generator, torch.Generator):
            seeding.kept.append(dataset_generator)
    else:
        batch_sampler, unbatched = _seeded_batch_sampler(dataloader, reseeders, seeding)
        if unbatched:
            kwargs["collate_fn"] = _FirstOfBatch(kwargs["collate_fn"])
        base_size = None if unbatched else getattr(batch_sampler, "batch_size", None)
        drop_last = bool(getattr(batch_sampler, "drop_last", False))
    if split_batches and base_size is not None and base_size % n != 0:
        raise ValueError(
            f"split_batches=True cuts every batch into {n} equal pieces, but the batch size "
            f"{base_size} is not a round multiple of {n}. Use a multiple of {n}, or "
            "split_batches=False."
        )
    per_process = base_size // n if (split_batches and base_size is not None) else base_size
    total = base_size if split_batches or base_size is None else base_size * n
    settings = LoaderSettings(
        num_processes=n,
        process_index=index,
        split_batches=config.split_batches,
        even_batches=config.even_batches,
        drop_last=drop_last,
        batch_size=per_process,
        base_batch_size=base_size,
        total_batch_size=total,
        device=torch.device(device) if device is not None else None,
        put_on_device=put_on_device,
        non_blocking=config.non_blocking,
        use_stateful_dataloader=config.use_stateful_dataloader,
        rng_types=_rng_types(rng_types, seeding, dispatch),
        synchronized_generator=seeding.kept[0] if seeding.kept else None,
        user_generator=dataloader.generator,
        sampler_is_batch_sampler=sampler_is_batch_sampler,
    )
    common: dict[str, Any] = {"settings": settings, "position": position, "reseeders": reseeders}

    if dispatch:
        if iterable:
            if hasattr(dataset, "set_epoch"):
                reseeders.append(lambda seed, epoch: dataset.set_epoch(epoch))
            kwargs.update(batch_size=base_size, drop_last=drop_last)
        elif sampler_is_batch_sampler:
            kwargs.update(sampler=batch_sampler, batch_size=None)
        else:
            kwargs["batch_sampler"] = batch_sampler
        return DataLoaderDispatcher(
            dataset, loader_kwargs=kwargs, slice_fn=slice_fn_for_dispatch, **common
        )
    if iterable:
        own = _native_shard(dataset, n, index) if n > 1 and not split_batches else None
        if own is not None:  # each process reads its own files
            reseeders.append(lambda seed, epoch: own.set_epoch(epoch))
            return DataLoaderShard(own, loader_kwargs=kwargs, **common)
        shard = IterableDatasetShard(dataset, base_size or 1, drop_last, n, index, split_batches)
        reseeders.append(lambda seed, epoch: shard.set_epoch(epoch))
        return DataLoaderShard(shard, loader_kwargs=kwargs, **common)
    assert batch_sampler is not None
    shard_sampler = BatchSamplerShard(batch_sampler, n, index, split_batches, even_batches)
    return DataLoaderShard(dataset, loader_kwargs=kwargs, shard_sampler=shard_sampler, **common)


def _native_shard(dataset: Any, processes: int, index: int) -> Any:
    """This process's part of a Hugging Face ``datasets.IterableDataset`` that has a shard (a
    file) for every process, split by its own ``shard()`` as Accelerate does, instead of every
    process reading it all and keeping every n-th batch; None for any other dataset. Such a
    dataset means ``datasets`` is already imported."""
    kind = getattr(sys.modules.get("datasets"), "IterableDataset", None)
    if kind is None or not isinstance(dataset, kind) or dataset.n_shards < processes:
        return None
    return dataset.shard(num_shards=processes, index=index)


register_loader_builder(prepare_data_loader)
