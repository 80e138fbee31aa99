"""IterableDatasetShard: one process's share of every global batch of an iterable dataset."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from torch.utils.data import IterableDataset

from ..validation import is_int

__all__ = ["IterableDatasetShard"]


@dataclass(eq=False, repr=False)
class IterableDatasetShard(IterableDataset):
    """The samples of an iterable dataset that belong to one process.

    The dataset is read in global batches of ``batch_size`` samples (``split_batches``) or
    ``batch_size * num_processes`` samples; process ``i`` yields the ``i``-th equal slice of
    each. A last, incomplete global batch is dropped with ``drop_last``, otherwise completed
    with samples from the first global batch so that every process yields as many samples.

    Args:
        dataset: the iterable dataset (every process must iterate it in the same order).
        batch_size: the batch size of the loader (per process unless ``split_batches``).
        drop_last: drop the last incomplete global batch.
        num_processes: processes sharing the data.
        process_index: this process.
        split_batches: ``batch_size`` is the global batch size, split between processes.
    """

    dataset: Any
    batch_size: int = 1
    drop_last: bool = False
    num_processes: int = 1
    process_index: int = 0
    split_batches: bool = False
    epoch: int = field(default=0, init=False)
    duplicated_samples: int = field(default=0, init=False)
    last_batch_real_samples: int = field(default=-1, init=False)

    def __post_init__(self) -> None:
        batch_size, num_processes = self.batch_size, self.num_processes
        process_index, split_batches = self.process_index, self.split_batches
        if not is_int(batch_size) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}.")
        if not isinstance(num_processes, int) or num_processes < 1:
            raise ValueError(f"num_processes must be a positive int, got {num_processes!r}.")
        if not isinstance(process_index, int) or not 0 <= process_index < num_processes:
            raise ValueError(f"process_index={process_index!r} must be in 0..{num_processes - 1}.")
        if split_batches and batch_size > 1 and batch_size % num_processes != 0:
            raise ValueError(
                f"split_batches=True cuts every batch into {num_processes} equal pieces, but "
                f"the batch size {batch_size} is not a round multiple of {num_processes}."
            )

    @property
    def global_batch_size(self) -> int:
        """Samples in one global batch (all processes together)."""
        if self.split_batches:
            return max(self.batch_size, self.num_processes)
        return self.batch_size * self.num_processes

    @property
    def piece_size(self) -> int:
        """Samples this process takes from each global batch."""
        return self.global_batch_size // self.num_processes

    def set_epoch(self, epoch: int) -> None:
        """Record the epoch and forward it to the dataset if it has ``set_epoch``."""
        self.epoch = epoch
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    def __len__(self) -> int:
        total = len(self.dataset)
        size = self.global_batch_size
        rounds = total // size if self.drop_last else math.ceil(total / size)
        return rounds * self.piece_size

    def __iter__(self) -> Iterator[Any]:
        size, piece = self.global_batch_size, self.piece_size
        lo, hi = self.process_index * piece, (self.process_index + 1) * piece
        self.duplicated_samples = 0
        self.last_batch_real_samples = -1
        first: list[Any] = []
        buffer: list[Any] = []
        for item in self.dataset:
            buffer.append(item)
            if len(buffer) == size:
                self.last_batch_real_samples = size
                yield from buffer[lo:hi]
                if not first:
                    first = buffer
                buffer = []
        if not buffer or self.drop_last:
            return
        self.last_batch_real_samples = len(buffer)
        source = first or list(buffer)
        self.duplicated_samples = size - len(buffer)
        while len(buffer) < size:
            buffer.extend(source[: size - len(buffer)])
        yield from buffer[lo:hi]

    def static_remainder(self) -> int:
        """Real samples of the last global batch, from the dataset length (-1 if unsized)."""
        try:
            total = len(self.dataset)
        except TypeError:
            return -1
        size = self.global_batch_size
        if total == 0:
            return -1
        if self.drop_last:
            return size if total >= size else -1
        return total % size or size
