"""``use_stateful_dataloader=True``: prepared loaders that are torchdata ``StatefulDataLoader``s.

With the option, :class:`~nbaccel.data.DataLoaderShard`, :class:`~nbaccel.data.DataLoaderDispatcher`
and :class:`~nbaccel.data.SkipDataLoader` are built as subclasses of both their own class and
``torchdata.stateful_dataloader.StatefulDataLoader`` (:func:`stateful_class`), so
``isinstance(loader, StatefulDataLoader)`` holds and ``state_dict()`` is torchdata's: the state
of the loader's iterator as of the batches handed out so far (a prepared loader reads one batch
ahead, so the state is recorded before each batch it reads, as Accelerate does), with
``_iterator_finished`` telling whether the pass had reached its last batch. When the order of a
loader depends on nbaccel's shuffle seed and epoch (a shuffling sampler nbaccel seeds, a
``set_epoch`` it calls), the state also holds nbaccel's position, ``"epoch"``,
``"batches_yielded"`` and ``"seed"``, so that a fresh process resumes in the same shuffle order
(and a loader prepared without the option can resume from it with ``skip_first_batches``);
torchdata and Accelerate ignore those keys.

``load_state_dict`` takes torchdata's state (the next pass continues where it was taken, with
torchdata's own fast-forward), or nbaccel's ``{"epoch", "batches_yielded", "seed"}`` alone (the
next pass leaves out the batches already yielded).
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader

__all__ = [
    "StatefulLoaderMixin",
    "class_for",
    "is_stateful",
    "is_torchdata_state",
    "stateful_class",
]

FINISHED = "_iterator_finished"  # torchdata's key; Accelerate sets it to end_of_dataloader
_CLASSES: dict[tuple[type, type | None], type] = {}


def stateful_class(base: type, mixin: type | None = None) -> type:
    """``base`` as a subclass of torchdata's ``StatefulDataLoader`` too (``mixin`` first)."""
    if getattr(base, "_torchdata_loader", None) is not None:
        return base
    key = (base, mixin)
    if key not in _CLASSES:
        try:
            # torchdata is optional: only use_stateful_dataloader=True needs it
            from torchdata.stateful_dataloader import StatefulDataLoader
            from torchdata.stateful_dataloader.sampler import BatchSampler as TorchdataBatchSampler
        except ImportError as error:
            raise ImportError(
                "use_stateful_dataloader=True builds the data loaders on torchdata's "
                "StatefulDataLoader (torchdata 0.8 or later), which is not installed here. "
                "Install it with `pip install torchdata`, or leave use_stateful_dataloader "
                "False (then resume mid-epoch with skip_first_batches)."
            ) from error
        bases = (base, StatefulDataLoader) if mixin is None else (mixin, base, StatefulDataLoader)
        namespace = {
            "__module__": base.__module__,
            "__doc__": base.__doc__,
            "_torchdata_loader": StatefulDataLoader,
            "_torchdata_batch_sampler": TorchdataBatchSampler,
        }
        _CLASSES[key] = type(f"Stateful{base.__name__}", bases, namespace)
    return _CLASSES[key]


def class_for(cls: type, kwargs: dict[str, Any]) -> type:
    """The class a prepared loader built with ``kwargs`` gets: ``cls``, or with
    ``use_stateful_dataloader=True`` (Accelerate's constructors' keyword, or the settings
    ``prepare_data_loader`` passes) its StatefulDataLoader subclass."""
    settings = kwargs.get("settings")
    wanted = kwargs.get("use_stateful_dataloader") or (
        settings is not None and settings.use_stateful_dataloader
    )
    return stateful_class(cls, StatefulLoaderMixin) if wanted else cls


def is_torchdata_state(state: dict[str, Any]) -> bool:
    """Whether ``state`` is torchdata's (of one process or of workers; ``{}``: from the start)
    rather than nbaccel's ``{"epoch", "batches_yielded", "seed"}`` alone."""
    return not state or "_num_yielded" in state or "_snapshot" in state


def is_stateful(obj: Any) -> bool:
    """Whether ``obj`` has ``state_dict`` and ``load_state_dict`` (torchdata's ``Stateful``)."""
    return callable(getattr(obj, "state_dict", None)) and callable(
        getattr(obj, "load_state_dict", None)
    )


class _ShardBatches:
    """One process's batches when nothing is shared out: the iterator of the wrapped batch
    sampler itself, whose state (torchdata's ``samples_yielded``...) becomes the loader's."""

    def __init__(self, shard: Any, iterator: Any) -> None:
        self._shard = shard
        self._iterator = iterator
        shard.duplicated_samples = 0
        shard.last_batch_real_samples = -1

    def __iter__(self) -> _ShardBatches:
        return self

    def __next__(self) -> list[int]:
        batch = list(next(self._iterator))
        self._shard.last_batch_real_samples = len(batch)
        return batch

    def state_dict(self) -> dict[str, Any]:
        return dict(self._iterator.state_dict())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._iterator.load_state_dict(state_dict)


class _ShardSource:
    """What torchdata iterates for a ``BatchSamplerShard``: the shard, or for one process
    that does not leave batches out, the wrapped batch sampler's own stateful iterator."""

    def __init__(self, shard: Any, stateful_batches: Any) -> None:
        self.shard = shard
        self._stateful_batches = stateful_batches

    def __len__(self) -> int:
        return len(self.shard)

    def __iter__(self) -> Iterator[list[int]]:
        shard = self.shard
        if shard.num_processes == 1 and not getattr(shard, "_skip_batches", 0):
            iterator = iter(self._stateful_batches(shard.batch_sampler))
            if is_stateful(iterator):
                return _ShardBatches(shard, iterator)
        return iter(shard)


@dataclasses.dataclass
class _Recorded:
    """Where the current pass stands: torchdata's state as of the batches handed out, the
    epoch it reads, and the batches it had handed out before it resumed from a state."""

    state: dict[str, Any] | None = None
    epoch: int = 0
    before: int = 0
    loaded: int = 0  # ``before`` of the next pass, when it resumes from a loaded state


class StatefulLoaderMixin:
    """What a prepared loader (``PreparedLoaderMixin``) adds as a torchdata StatefulDataLoader.

    It comes first among the bases of the class :func:`stateful_class` makes, before the
    prepared loader's class and ``StatefulDataLoader``.
    """

    _torchdata_loader: Any
    _torchdata_batch_sampler: Any
    _recorded: _Recorded
    _position: Any
    _settings: Any
    _reseeders: list[Any]
    _loader_generator: torch.Generator
    _init_kwargs: dict[str, Any]
    next_iter_state: dict[str, Any] | None
    end_of_dataloader: bool
    dataset: Any
    _seed_pass: Callable[[], None]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        options = kwargs.get("loader_kwargs")
        if options is not None:  # torchdata before 0.11 lacks DataLoader's in_order
            accepted = inspect.signature(self._torchdata_loader.__init__).parameters
            kwargs["loader_kwargs"] = {k: v for k, v in options.items() if k in accepted}
        with warnings.catch_warnings():
            # torchdata 0.11's constructor calls torch.set_vital, which recent torch deprecates:
            # nothing a user can act on
            warnings.filterwarnings("ignore", "'set_vital' is deprecated", UserWarning)
            super().__init__(*args, **kwargs)
        self.__dict__.setdefault("_recorded", _Recorded())

    # -- what torchdata iterates --------------------------------------------------------------
    def _stateful_batches(self, batch_sampler: Any) -> Any:
        """torch's own BatchSampler is iterated as torchdata's (whose iterator records its
        position), as ``StatefulDataLoader(batch_size=...)`` builds it."""
        if type(batch_sampler) is BatchSampler:
            return self._torchdata_batch_sampler(
                batch_sampler.sampler, batch_sampler.batch_size, batch_sampler.drop_last
            )
        return batch_sampler

    @property
    def _index_sampler(self) -> Any:
        loader: Any = self
        source = loader.batch_sampler if loader._auto_collation else loader.sampler
        shard = self.__dict__.get("_shard_sampler")
        if shard is not None and source is shard:
            return _ShardSource(shard, self._stateful_batches)
        return self._stateful_batches(source)

    def _noted(self, batches: Iterator[Any], every: int = 1) -> Iterator[Any]:
        """Record the state of torchdata's iterator ``batches`` now, and again each time
        another ``every`` batches were read: the position of the batches handed out so far,
        since a prepared loader reads ahead (one batch; ``every`` of them, a dispatcher)."""
        recorded = self._recorded
        recorded.epoch = self._position.epoch
        recorded.state = batches.state_dict()  # type: ignore[attr-defined]
        self.end_of_dataloader = False
        return self._noting(batches, every)

    def _noting(self, batches: Any, every: int) -> Iterator[Any]:
        count = 0
        while True:
            if count and count % every == 0:
                self._recorded.state = batches.state_dict()
            try:
                batch = next(batches)
            except StopIteration:
                return
            count += 1
            yield batch

    def _begin_pass(self) -> int:
        skip = super()._begin_pass()  # type: ignore[misc]
        recorded, resuming = self._recorded, self.next_iter_state is not None
        recorded.before, recorded.loaded = (recorded.loaded if resuming else 0), 0
        if resuming and self.__dict__.get("_shard_sampler") is None:
            return 0  # the loaded position counts the batches left out too
        return int(skip)

    def set_epoch(self, epoch: int) -> None:
        """As without the option; the next pass starts at the beginning of ``epoch``."""
        super().set_epoch(epoch)  # type: ignore[misc]
        self._recorded.state = None

    # -- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """torchdata's state of this loader, as of the batches handed out (see the module)."""
        recorded, position = self._recorded, self._position
        finished, done = False, 0
        if recorded.state is not None:
            state, epoch = dict(recorded.state), recorded.epoch
            finished = self.end_of_dataloader
            done = recorded.before + position.batches_yielded
        elif self.next_iter_state is not None:
            state, epoch, done = dict(self.next_iter_state), position.epoch, recorded.loaded
        else:
            state, epoch = self._fresh_state(), position.epoch
        state[FINISHED] = finished
        if self._reseeders:  # the order depends on the epoch and the seed: nbaccel's position
            state["epoch"] = epoch + 1 if finished else epoch
            state["batches_yielded"] = 0 if finished else done
            state["seed"] = position.seed
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue, on the next pass, from a state :meth:`state_dict` (or torchdata's
        ``StatefulDataLoader.state_dict``, or nbaccel's own format) returned."""
        loader, recorded = self._torchdata_loader, self._recorded
        recorded.state, recorded.loaded = None, 0
        self.end_of_dataloader = False
        self.next_iter_state = None
        if not is_torchdata_state(state_dict):  # nbaccel's {"epoch", "batches_yielded", "seed"}
            super().load_state_dict(state_dict)  # type: ignore[misc]
            loader.load_state_dict(self, {})  # drops an iterator made for state_dict()
            return
        state = dict(state_dict)
        position = self._position
        epoch, seed = state.pop("epoch", None), state.pop("seed", None)
        done = state.pop("batches_yielded", None)
        if epoch is not None:
            position.epoch = int(epoch)
        if seed is not None:
            position.seed = int(seed)
        position.resume_skip = position.batches_yielded = 0
        if state.get(FINISHED):  # a pass that had reached its end: the next one, from its start
            loader.load_state_dict(self, {})
            return
        recorded.loaded = int(done or 0)
        loader.load_state_dict(self, state)

    def _generators_kept(self) -> list[torch.Generator]:
        """The user's generators the loader uses as they are (nbaccel never reseeds them)."""
        settings = self._settings
        found = {id(g): g for g in (settings.user_generator, settings.synchronized_generator)}
        return [g for g in found.values() if g is not None]

    def _fresh_state(self) -> dict[str, Any]:
        """The state a pass has before its first batch, without a lasting side effect: the
        iterator torchdata makes for it is dropped and the generators are put back."""
        kept = self._generators_kept()
        saved = [g.get_state() for g in kept]
        self._seed_pass()
        loader = self._torchdata_loader
        try:
            loader.load_state_dict(self, {})  # drop an earlier pass's iterator
            return dict(loader.state_dict(self))
        finally:
            loader.load_state_dict(self, {})  # and this one: the pass makes its own
            for generator, state in zip(kept, saved, strict=True):
                generator.set_state(state)

    # -- DataLoaderDispatcher ------------------------------------------------------------------
    def _shared_position(self) -> Any:
        """Sent with every batch: the followers' state_dict() is process 0's."""
        return (self._recorded.state, self._recorded.epoch)

    def _adopt_position(self, shared: Any) -> None:
        if shared is not None:
            self._recorded.state, self._recorded.epoch = shared
            self.next_iter_state = None  # a follower never reads the data: process 0 resumed

    def _first_batches_again(self, count: int) -> list[Any] | None:
        """On a pass resuming mid-way, process 0 of a dispatcher reads the pass's first
        ``count`` batches again: an incomplete last global batch is completed with their
        samples, as the interrupted pass would have done."""
        settings = self._settings
        if self.next_iter_state is None or not settings.even_batches or settings.drop_last:
            return None
        kept = self._generators_kept()
        saved = [g.get_state() for g in kept]
        generator = torch.Generator()
        generator.set_state(self._loader_generator.get_state())
        kwargs = dict(self._init_kwargs["loader_kwargs"])
        kwargs.pop("snapshot_every_n_steps", None)  # StatefulDataLoader's own
        plain = DataLoader(self.dataset, generator=generator, **kwargs)
        try:
            return list(itertools.islice(iter(plain), count))
        finally:
            for g, state in zip(kept, saved, strict=True):
                g.set_state(state)
            self._seed_pass()  # the samplers start the resumed pass as if nothing was read
