"""Prepared data loaders: the shared iteration protocol and the per-process DataLoaderShard."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from ..state import GradientState
from ..validation import is_int
from .batches import send_to_device
from .rng import synchronize_rng_states
from .samplers import BatchSamplerShard
from .shards import IterableDatasetShard
from .stateful import class_for
from .xla_steps import step_marker

__all__ = [
    "DataLoaderShard",
    "DataLoaderStateMixin",
    "LoaderPosition",
    "LoaderSettings",
    "PreparedLoaderMixin",
]

Reseeder = Callable[[int, int], None]
Step = tuple[Any, bool, int]  # (batch, is the last batch, remainder)


@dataclasses.dataclass
class LoaderPosition:
    """Where a prepared loader stands; shared with the loaders ``skip_first_batches`` makes."""

    epoch: int = 0
    batches_yielded: int = 0
    seed: int = 0
    resume_skip: int = 0


@dataclasses.dataclass(frozen=True)
class LoaderSettings:
    """What a prepared loader needs to know about the job and the original loader."""

    num_processes: int = 1
    process_index: int = 0
    split_batches: bool = False
    even_batches: bool = True
    drop_last: bool = False
    batch_size: int | None = None
    base_batch_size: int | None = None
    total_batch_size: int | None = None
    device: torch.device | None = None
    put_on_device: bool = False
    non_blocking: bool = False
    use_stateful_dataloader: bool = False
    rng_types: tuple[str, ...] = ()
    synchronized_generator: torch.Generator | None = None
    user_generator: torch.Generator | None = None
    sampler_is_batch_sampler: bool = False


# Accelerate's constructor options besides the DataLoader's (the rest are not needed here)
_ADAPTER_OPTIONS = (
    "rng_types",
    "synchronized_generator",
    "use_stateful_dataloader",
    "_drop_last",
    "_non_blocking",
    "torch_device_mesh",
    "slice_fn",
    "split_batches",
)


# How a loader built from DataLoader arguments (Accelerate's constructors) is made: by
# ``prepare_data_loader``, which registers itself here when ``.prepare`` is imported (it builds
# the loaders of this module, so this module cannot import it).
_BUILDERS: dict[str, Callable[..., Any]] = {}


def register_loader_builder(build: Callable[..., Any]) -> None:
    """Set the function that builds a one-process prepared loader from a ``DataLoader``."""
    _BUILDERS["prepare"] = build


class PreparedLoaderMixin:
    """Epochs, seeding, state, GradientState registration and look-ahead for prepared loaders.

    Attributes:
        end_of_dataloader: True while the last batch of a pass is being used.
        remainder: real samples of the last global batch once it is reached, -1 before.
        skip_batches: batches left out at the start of every pass.
    """

    dataset: Any
    _settings: LoaderSettings
    _position: LoaderPosition
    _reseeders: list[Reseeder]
    _loader_generator: torch.Generator
    skip_batches: int
    end_of_dataloader: bool
    remainder: int

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # with use_stateful_dataloader=True, a torchdata StatefulDataLoader too (stateful.py)
        return super().__new__(class_for(cls, kwargs))

    def _setup(
        self,
        settings: LoaderSettings,
        position: LoaderPosition,
        reseeders: list[Reseeder],
        skip_batches: int,
    ) -> None:
        self._settings = settings
        self._position = position
        self._reseeders = reseeders
        # the user's DataLoader(generator=...) as it is (the order stays theirs), else our own
        self._loader_generator = settings.user_generator or torch.Generator()
        self.skip_batches = skip_batches
        self.end_of_dataloader = False
        self.remainder = -1

    # -- documented attributes ---------------------------------------------------------------
    @property
    def device(self) -> torch.device | None:
        """Where batches are moved (None when they stay where the dataset puts them)."""
        return self._settings.device if self._settings.put_on_device else None

    @property
    def total_batch_size(self) -> int | None:
        """Samples in one global batch, all processes together."""
        return self._settings.total_batch_size

    @property
    def total_dataset_length(self) -> int | None:
        """Length of the dataset (None when it has none)."""
        if isinstance(self.dataset, IterableDatasetShard):
            dataset = self.dataset.dataset
        else:
            dataset = self.dataset
        try:
            return len(dataset)
        except TypeError:
            return None

    @property
    def epoch(self) -> int:
        """The epoch the next (or current) pass uses."""
        return self._position.epoch

    @property
    def use_stateful_dataloader(self) -> bool:
        """Whether the loader was prepared with ``use_stateful_dataloader=True``."""
        return self._settings.use_stateful_dataloader

    def set_epoch(self, epoch: int) -> None:
        """Use the shuffle order of ``epoch`` on the next pass (every pass advances it); a
        sampler or batch sampler with its own ``set_epoch`` hears of it at once."""
        if not is_int(epoch) or epoch < 0:
            raise ValueError(f"set_epoch(epoch=...) must be a non-negative int, got {epoch!r}.")
        self._position.epoch = epoch
        for reseed in self._reseeders:
            reseed(self._position.seed, epoch)

    @property
    def gradient_state(self) -> GradientState:
        """The :class:`GradientState` this loader reports its progress to."""
        return GradientState()

    @property
    def iteration(self) -> int:
        """Accelerate's name for :attr:`epoch`."""
        return self._position.epoch

    def __getattr__(self, name: str) -> Any:
        if name == "base_dataloader":  # Accelerate's adapter attribute: the loader itself
            return self
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _adopt(
        self,
        dataset: Any,
        device: Any,
        skip_batches: int,
        dataloader_kwargs: dict[str, Any],
        dispatch: bool,
    ) -> None:
        """Build the loader as Accelerate's constructor does, from ``DataLoader`` arguments:
        one process's loader (``prepare_data_loader`` with one process), ``device`` for its
        batches."""
        options = {k: dataloader_kwargs.pop(k) for k in _ADAPTER_OPTIONS if k in dataloader_kwargs}
        built = _BUILDERS["prepare"](
            DataLoader(dataset, **dataloader_kwargs),
            device=device,
            num_processes=1,
            process_index=0,
            put_on_device=device is not None,
            dispatch_batches=dispatch,
            rng_types=options.get("rng_types"),
            non_blocking=bool(options.get("_non_blocking", False)),
            use_stateful_dataloader=bool(options.get("use_stateful_dataloader", False)),
        )
        self.__dict__.update(built.__dict__)
        self.skip_batches = skip_batches

    # -- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, int]:
        """The loader's position: epoch, batches yielded in this epoch's pass, and seed."""
        return {
            "epoch": self._position.epoch,
            "batches_yielded": self._position.batches_yielded,
            "seed": self._position.seed,
        }

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        """Restore a position: the next pass yields exactly the batches that were left."""
        missing = {"epoch", "batches_yielded", "seed"} - set(state_dict)
        if missing:
            raise ValueError(
                f"load_state_dict: the state is missing {sorted(missing)}; pass what "
                "state_dict() of a prepared data loader returned."
            )
        self._position.epoch = int(state_dict["epoch"])
        self._position.seed = int(state_dict["seed"])
        self._position.resume_skip = int(state_dict["batches_yielded"])
        self._position.batches_yielded = int(state_dict["batches_yielded"])

    # -- iteration protocol ------------------------------------------------------------------
    def _begin_pass(self) -> int:
        """Seed everything for the current epoch and return how many batches to skip.

        The ``rng_types`` are synchronised first (process 0's state), as Accelerate does at
        the start of every pass; the user's own generator is never reseeded.
        """
        position, settings = self._position, self._settings
        if settings.rng_types and settings.num_processes > 1:
            synchronize_rng_states(
                settings.rng_types, settings.synchronized_generator, strict=False
            )
        self._seed_pass()
        skip = self.skip_batches + position.resume_skip
        position.resume_skip = 0
        return skip

    def _seed_pass(self) -> None:
        """Reseed the samplers and the loader's own generator for the current epoch."""
        position, settings = self._position, self._settings
        for reseed in self._reseeders:
            reseed(position.seed, position.epoch)
        if settings.user_generator is None:
            mixed = position.seed * 1_000_003 + position.epoch * 1_009 + settings.process_index
            self._loader_generator.manual_seed(mixed % 2**63)

    def _noted(self, batches: Iterator[Any], every: int = 1) -> Iterator[Any]:
        """The DataLoader's batches (a stateful loader records its position: stateful.py)."""
        return batches

    def _run(self, skipped: int, steps: Iterator[Step]) -> Iterator[Any]:
        """Yield the batches of ``steps``, keeping flags, position and GradientState current."""
        gradient_state = GradientState()
        self.end_of_dataloader = False
        self.remainder = -1
        gradient_state._add_dataloader(self)
        position = self._position
        position.batches_yielded = skipped
        settings = self._settings
        mark_step = step_marker(settings.device)
        try:
            for batch, is_last, remainder in steps:
                if mark_step is not None:
                    mark_step()  # run what the previous batch recorded (XLA)
                if is_last:
                    self.end_of_dataloader = True
                    self.remainder = remainder
                if settings.put_on_device and settings.device is not None:
                    batch = send_to_device(batch, settings.device, settings.non_blocking)
                position.batches_yielded += 1
                yield batch
            position.epoch += 1
            position.batches_yielded = 0
            if mark_step is not None:
                mark_step()
        finally:
            gradient_state._remove_dataloader(self)


def look_ahead(batches: Iterator[Any], remainder: Callable[[], int]) -> Iterator[Step]:
    """Pair every batch with whether it is the last, reading one batch ahead."""
    iterator = iter(batches)
    try:
        current = next(iterator)
    except StopIteration:
        return
    for following in iterator:
        yield current, False, -1
        current = following
    yield current, True, remainder()


# Accelerate's name for the mixin (``accelerate.data_loader.DataLoaderStateMixin``)
DataLoaderStateMixin = PreparedLoaderMixin


class DataLoaderShard(PreparedLoaderMixin, DataLoader):
    """A DataLoader yielding one process's batches (built by ``prepare_data_loader``).

    For map-style datasets the batches come from a :class:`BatchSamplerShard`; for iterable
    datasets the dataset is an :class:`IterableDatasetShard`. ``len()`` is the number of
    batches this process sees; ``batch_size`` is this process's batch size.
    """

    def __init__(
        self,
        dataset: Any,
        device: Any = None,
        *,
        settings: LoaderSettings | None = None,
        position: LoaderPosition | None = None,
        reseeders: list[Reseeder] | None = None,
        loader_kwargs: dict[str, Any] | None = None,
        shard_sampler: BatchSamplerShard | None = None,
        skip_batches: int = 0,
        **dataloader_kwargs: Any,
    ) -> None:
        if settings is None or position is None or reseeders is None or loader_kwargs is None:
            self._adopt(dataset, device, skip_batches, dataloader_kwargs, dispatch=False)
            return
        self._init_kwargs = {
            "dataset": dataset,
            "settings": settings,
            "position": position,
            "reseeders": reseeders,
            "loader_kwargs": loader_kwargs,
            "shard_sampler": shard_sampler,
        }
        self._setup(settings, position, reseeders, skip_batches)
        # The shard is the loader's batch sampler itself (its ``batch_sampler`` the user's, as
        # in Accelerate); the batches a pass leaves out are set on it as the pass starts.
        self._shard_sampler = shard_sampler
        if shard_sampler is not None and settings.sampler_is_batch_sampler:
            # DataLoader(batch_size=None, sampler=BatchSampler(...)): the dataset takes lists
            super().__init__(
                dataset,
                sampler=shard_sampler,
                batch_size=None,
                generator=self._loader_generator,
                **loader_kwargs,
            )
        elif shard_sampler is not None:
            super().__init__(
                dataset,
                batch_sampler=shard_sampler,
                generator=self._loader_generator,
                **loader_kwargs,
            )
        else:
            super().__init__(
                dataset,
                batch_size=settings.batch_size,
                drop_last=False,
                generator=self._loader_generator,
                **loader_kwargs,
            )
        # The per-process batch size, also when batches come from a batch sampler.
        object.__setattr__(self, "batch_size", settings.batch_size)

    def with_skip(self, num_batches: int) -> DataLoaderShard:
        """A loader sharing this one's position that leaves out the first ``num_batches``."""
        return DataLoaderShard(**self._init_kwargs, skip_batches=num_batches)

    def __len__(self) -> int:
        if self._shard_sampler is not None:
            full = len(self._shard_sampler)
        else:
            full = len(self.dataset) // max(1, self._settings.batch_size or 1)
        return max(0, full - self.skip_batches)

    def _final_remainder(self) -> int:
        if self._shard_sampler is not None:
            return self._shard_sampler.last_batch_real_samples
        shard = self.dataset
        if isinstance(shard, IterableDatasetShard):
            if shard.last_batch_real_samples >= 0:
                return shard.last_batch_real_samples
            return shard.static_remainder()
        return -1

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        skip = self._begin_pass()
        if self._shard_sampler is not None:
            self._shard_sampler._skip_batches = skip
            batches: Iterator[Any] = self._noted(super().__iter__())
        else:
            batches = itertools.islice(self._noted(super().__iter__()), skip, None)
        return self._run(skip, look_ahead(batches, self._final_remainder))
