"""DataLoaderDispatcher: process 0 reads the data and sends every process its slice."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset

from .batches import batch_length, concat_batches, slice_batch
from .loaders import LoaderPosition, LoaderSettings, PreparedLoaderMixin, Reseeder, Step
from .samplers import rounds_for

__all__ = ["DataLoaderDispatcher"]

SliceFn = Callable[[Any, slice, int, int], Any]


def _default_slice(batch: Any, piece: slice, process_index: int, num_processes: int) -> Any:
    return slice_batch(batch, piece.start, piece.stop)


class DataLoaderDispatcher(PreparedLoaderMixin, DataLoader):
    """A DataLoader whose process 0 iterates the data and sends each process its slice.

    Process 0 reads one global batch at a time (one batch of the original loader with
    ``split_batches``, else ``num_processes`` of them joined), cuts it into equal slices and
    scatters them with ``torch.distributed.scatter_object_list``. Every process sees the
    same number of batches. With ``even_batches`` the last global batch is completed with
    samples from the first one; without it the last slices may be shorter (or empty).
    All processes must iterate the loader together.
    """

    def __init__(
        self,
        dataset: Any,
        *,
        settings: LoaderSettings | None = None,
        position: LoaderPosition | None = None,
        reseeders: list[Reseeder] | None = None,
        loader_kwargs: dict[str, Any] | None = None,
        slice_fn: SliceFn | None = None,
        skip_batches: int = 0,
        **dataloader_kwargs: Any,
    ) -> None:
        if settings is None or position is None or reseeders is None or loader_kwargs is None:
            device = dataloader_kwargs.pop("device", None)
            self._adopt(dataset, device, skip_batches, dataloader_kwargs, dispatch=True)
            return
        self._init_kwargs = {
            "dataset": dataset,
            "settings": settings,
            "position": position,
            "reseeders": reseeders,
            "loader_kwargs": loader_kwargs,
            "slice_fn": slice_fn,
        }
        self._setup(settings, position, reseeders, skip_batches)
        self._slice_fn: SliceFn = slice_fn or _default_slice
        super().__init__(dataset, generator=self._loader_generator, **loader_kwargs)
        self._base_batch_size = settings.base_batch_size
        object.__setattr__(self, "batch_size", settings.batch_size)

    def with_skip(self, num_batches: int) -> DataLoaderDispatcher:
        """A loader sharing this one's position that leaves out the first ``num_batches``."""
        return DataLoaderDispatcher(**self._init_kwargs, skip_batches=num_batches)

    def _base_length(self) -> int:
        if self.batch_sampler is not None and not isinstance(self.dataset, IterableDataset):
            return len(self.batch_sampler)  # type: ignore[arg-type]
        if self._settings.sampler_is_batch_sampler:
            return len(self.sampler)  # type: ignore[arg-type]
        try:
            total = len(self.dataset)
        except TypeError as error:
            raise TypeError(
                "this prepared data loader has no length: its iterable dataset has no __len__."
            ) from error
        size = self._base_batch_size
        if size is None:
            return total
        return total // size if self._settings.drop_last else math.ceil(total / size)

    def __len__(self) -> int:
        settings = self._settings
        rounds = rounds_for(
            self._base_length(), settings.num_processes, settings.split_batches, settings.drop_last
        )
        return max(0, rounds - self.skip_batches)

    # -- process 0 ---------------------------------------------------------------------------
    def _global_batches(self) -> Iterator[tuple[list[Any], int]]:
        """(slices for every process, real samples) for each global batch of the pass."""
        settings = self._settings
        n = settings.num_processes
        group = 1 if settings.split_batches else n
        expected = self._base_batch_size
        again = self._first_batches_again(group)
        first: Any = concat_batches(again) if again else None
        iterator = self._noted(super().__iter__(), group)
        while True:
            batches = list(itertools.islice(iterator, group))
            if not batches:
                return
            joined = concat_batches(batches)
            real = batch_length(joined)
            if first is None:
                first = joined
            complete = len(batches) == group and (expected is None or real == expected * group)
            if not complete and settings.drop_last:
                return
            size = math.ceil(real / n)
            if not complete and settings.even_batches and real % n:
                joined = concat_batches([joined, self._cycled(first, size * n - real)])
            pieces = [
                self._slice_fn(joined, slice(i * size, (i + 1) * size), i, n) for i in range(n)
            ]
            yield pieces, real

    @staticmethod
    def _cycled(first: Any, count: int) -> Any:
        available = batch_length(first)
        parts = []
        while count > 0:
            take = min(count, available)
            parts.append(slice_batch(first, 0, take))
            count -= take
        return concat_batches(parts)

    def _send(self, messages: list[Any] | None) -> Any:
        if self._settings.num_processes == 1:
            return messages[0] if messages else None
        received: list[Any] = [None]
        dist.scatter_object_list(received, messages, src=0)
        return received[0]

    def _lead(self, skip: int) -> Iterator[Step]:
        n = self._settings.num_processes
        produced = itertools.islice(self._global_batches(), skip, None)
        current = next(produced, None)
        if current is None:
            self._send([("stop",)] * n)
            return
        while True:
            following = next(produced, None)
            last = following is None
            pieces, real = current
            shared = self._shared_position()
            own = self._send([("batch", piece, last, real, shared) for piece in pieces])
            yield own[1], last, (real if last else -1)
            if following is None:
                return
            current = following

    # -- hooks of a stateful dispatcher (stateful.py) ------------------------------------------
    def _first_batches_again(self, count: int) -> list[Any] | None:
        """The first batches of a pass resuming mid-way, read again (None: not needed)."""
        return None

    def _shared_position(self) -> Any:
        """What process 0 sends with each batch about its position (None: nothing)."""
        return None

    def _adopt_position(self, shared: Any) -> None:
        """Take the position process 0 sent with a batch."""

    # -- every other process -----------------------------------------------------------------
    def _follow(self) -> Iterator[Step]:
        while True:
            message = self._send(None)
            if message[0] == "stop":
                return
            _, piece, last, real, shared = message
            self._adopt_position(shared)
            yield piece, last, (real if last else -1)
            if last:
                return

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        skip = self._begin_pass()
        steps = self._lead(skip) if self._settings.process_index == 0 else self._follow()
        return self._run(skip, steps)
