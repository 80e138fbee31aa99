"""Samplers: a seedable random sampler, the per-process batch shard, and batch skipping."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Sized
from typing import Any

import torch
from torch.utils.data import BatchSampler, RandomSampler

from ..validation import is_int

__all__ = ["BatchSamplerShard", "SeedableRandomSampler", "SkipBatchSampler"]


class SeedableRandomSampler(RandomSampler):
    """A RandomSampler whose order depends only on ``initial_seed + epoch``.

    It owns its generator and never draws from the global torch random number generator, so
    every process that shares ``initial_seed`` and ``epoch`` gets the same permutation. Each
    complete pass moves on to the next epoch; :meth:`set_epoch` picks one explicitly.

    Args:
        data_source: the dataset.
        replacement: draw with replacement.
        num_samples: samples per epoch (defaults to ``len(data_source)``).
        generator: the generator to reseed every epoch (a fresh one when None).
        data_seed: the base seed; None takes ``torch.initial_seed()``.
    """

    def __init__(
        self,
        data_source: Sized,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: torch.Generator | None = None,
        data_seed: int | None = None,
    ) -> None:
        generator = generator if generator is not None else torch.Generator()
        super().__init__(data_source, replacement, num_samples, generator=generator)
        self.initial_seed = int(data_seed if data_seed is not None else torch.initial_seed())
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Use the permutation of ``epoch`` on the next pass."""
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        assert self.generator is not None
        self.generator.manual_seed((self.initial_seed + self.epoch) % 2**63)
        yield from super().__iter__()
        self.set_epoch(self.epoch + 1)


def _last_short_batch(batch_sampler: Any, batch_size: int | None) -> int:
    """Size of the final short batch of a BatchSampler-like object (0 if none or unknown)."""
    if not batch_size or getattr(batch_sampler, "drop_last", False):
        return 0
    try:
        total = len(batch_sampler.sampler)
    except (AttributeError, TypeError):
        return 0
    return total % batch_size


class BatchSamplerShard(BatchSampler):
    """The batches of one process out of a batch sampler shared by ``num_processes``.

    Without ``split_batches`` process ``i`` takes batches ``i, i + N, i + 2N, ...``; with it,
    each batch is cut into N equal pieces and process ``i`` takes piece ``i``. With
    ``even_batches`` the last global batch is completed with samples from the start of the
    epoch so every process sees as many batches of the same size; :attr:`duplicated_samples`
    and :attr:`last_batch_real_samples` tell, after a pass, how many samples were repeated
    and how many real samples the last global batch held. With the wrapped sampler's
    ``drop_last``, an incomplete last round is dropped instead.

    Args:
        batch_sampler: yields lists of indices (a torch BatchSampler or similar).
        num_processes: processes sharing the data.
        process_index: this process.
        split_batches: split every batch between the processes.
        even_batches: make every process see the same number of batches.
    """

    def __init__(
        self,
        batch_sampler: Iterable[list[int]],
        num_processes: int = 1,
        process_index: int = 0,
        split_batches: bool = False,
        even_batches: bool = True,
    ) -> None:
        if not is_int(num_processes):
            raise TypeError(f"num_processes must be an int, got {num_processes!r}.")
        if num_processes < 1:
            raise ValueError(f"num_processes={num_processes} must be at least 1.")
        if not isinstance(process_index, int) or not 0 <= process_index < num_processes:
            raise ValueError(f"process_index={process_index!r} must be in 0..{num_processes - 1}.")
        batch_size = getattr(batch_sampler, "batch_size", None)
        if split_batches:
            if batch_size is None:
                raise ValueError(
                    "split_batches=True needs a batch sampler with a batch_size attribute "
                    f"({type(batch_sampler).__name__} has none)."
                )
            if batch_size % num_processes != 0:
                raise ValueError(
                    f"split_batches=True cuts every batch into {num_processes} equal pieces, "
                    f"but the batch size {batch_size} is not a round multiple of {num_processes}. "
                    "Use a batch size that is a multiple of the number of processes."
                )
        self.batch_sampler = batch_sampler
        self.sampler = getattr(batch_sampler, "sampler", None)  # type: ignore[assignment]
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.even_batches = even_batches
        self.batch_size: int | None = batch_size  # type: ignore[assignment]
        self.drop_last: bool = bool(getattr(batch_sampler, "drop_last", False))
        self.duplicated_samples = 0
        self.last_batch_real_samples = -1
        # Batches a pass leaves out (``len`` still counts them): the prepared loader sets it
        # as each pass starts (a resume, a skip), so that the loader's ``batch_sampler`` is
        # this shard and its ``batch_sampler`` the user's, as in Accelerate.
        self._skip_batches = 0

    @property
    def total_length(self) -> int:
        """Batches of the wrapped batch sampler (all processes together)."""
        return len(self.batch_sampler)  # type: ignore[arg-type]

    def __len__(self) -> int:
        total, n, i = self.total_length, self.num_processes, self.process_index
        if self.split_batches or n == 1:
            short = _last_short_batch(self.batch_sampler, self.batch_size)
            if self.even_batches or short == 0:
                return total
            piece = (self.batch_size or 0) // n
            return total - 1 + (1 if short > i * piece else 0)
        rounds, rest = divmod(total, n)
        if rest == 0 or self.drop_last:
            return rounds
        if self.even_batches:
            return rounds + 1
        return rounds + (1 if i < rest else 0)

    def __iter__(self) -> Iterator[list[int]]:
        # the skip is read now, when the loader's pass asks for the batches
        return itertools.islice(self._batches(), self._skip_batches, None)

    def _batches(self) -> Iterator[list[int]]:
        self.duplicated_samples = 0
        self.last_batch_real_samples = -1
        if self.num_processes == 1:  # nothing to share or even out: a faithful pass-through
            for batch in self.batch_sampler:
                self.last_batch_real_samples = len(batch)
                yield list(batch)
        elif self.split_batches:
            yield from self._iter_split()
        else:
            yield from self._iter_whole()

    def _pad(self, batch: list[int], size: int, filler: Iterator[int]) -> list[int]:
        missing = max(0, size - len(batch))
        self.duplicated_samples += missing
        return batch + list(itertools.islice(filler, missing))

    def _iter_split(self) -> Iterator[list[int]]:
        size = self.batch_size or 0
        piece = size // self.num_processes
        lo, hi = self.process_index * piece, (self.process_index + 1) * piece
        first: list[int] = []
        for batch in self.batch_sampler:
            batch = list(batch)
            if len(first) < size:
                first.extend(batch)
            if len(batch) != size and self.drop_last:
                continue
            self.last_batch_real_samples = len(batch)
            if len(batch) != size and self.even_batches:
                batch = self._pad(batch, size, itertools.cycle(first))
            if len(batch) > lo:
                yield batch[lo:hi]

    def _iter_whole(self) -> Iterator[list[int]]:
        n, size = self.num_processes, self.batch_size
        first: list[int] = []
        first_batches: list[list[int]] = []
        current: list[list[int]] = []
        for batch in self.batch_sampler:
            batch = list(batch)
            if len(first) < n * (size or len(batch)):
                first.extend(batch)
            if len(first_batches) < n:
                first_batches.append(batch)
            current.append(batch)
            full = size is None or all(len(b) == size for b in current)
            if len(current) == n and full:
                self.last_batch_real_samples = sum(len(b) for b in current)
                yield current[self.process_index]
                current = []
        if not current or self.drop_last:
            return
        self.last_batch_real_samples = sum(len(b) for b in current)
        if not self.even_batches:
            if self.process_index < len(current):
                yield current[self.process_index]
            return
        if size is None:  # batches of varying sizes: whole first batches complete the round
            cycle = itertools.cycle(first_batches)
            padding = [next(cycle) for _ in range(n - len(current))]
            self.duplicated_samples = sum(len(b) for b in padding)
            yield (current + padding)[self.process_index]
            return
        target = size
        filler = itertools.cycle(first)
        padded = [self._pad(b, target, filler) for b in current]
        padded += [self._pad([], target, filler) for _ in range(n - len(current))]
        yield padded[self.process_index]


class SkipBatchSampler(BatchSampler):
    """A batch sampler that leaves out the first ``skip_batches`` batches of another.

    Args:
        batch_sampler: the batch sampler to skip into.
        skip_batches: how many batches to leave out (on every pass).
    """

    def __init__(self, batch_sampler: Iterable[list[int]], skip_batches: int = 0) -> None:
        if not is_int(skip_batches):
            raise TypeError(f"skip_batches must be an int, got {skip_batches!r}.")
        if skip_batches < 0:
            raise ValueError(f"skip_batches={skip_batches} must not be negative.")
        self.batch_sampler = batch_sampler
        self.sampler = getattr(batch_sampler, "sampler", None)  # type: ignore[assignment]
        self.skip_batches = skip_batches
        self.batch_size = getattr(batch_sampler, "batch_size", None)  # type: ignore[assignment]
        self.drop_last = bool(getattr(batch_sampler, "drop_last", False))

    @property
    def total_length(self) -> int:
        """Batches of the wrapped sampler, skipped ones included."""
        return len(self.batch_sampler)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return max(0, self.total_length - self.skip_batches)

    def __iter__(self) -> Iterator[list[int]]:
        yield from itertools.islice(self.batch_sampler, self.skip_batches, None)


def rounds_for(total_batches: int, num_processes: int, split: bool, drop_last: bool) -> int:
    """Global rounds a dispatcher makes out of ``total_batches`` underlying batches."""
    if split:
        return total_batches
    if drop_last:
        return total_batches // num_processes
    return math.ceil(total_batches / num_processes)
