"""skip_first_batches: resume mid-epoch by leaving out the batches already seen."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader

from ..validation import is_int
from .loaders import PreparedLoaderMixin
from .prepare import loader_kwargs
from .samplers import SkipBatchSampler
from .stateful import stateful_class

__all__ = ["SkipDataLoader", "skip_first_batches"]


class SkipDataLoader(DataLoader):
    """A DataLoader that leaves out the first ``skip_batches`` batches of every pass.

    The skipped batches are still loaded (use :class:`SkipBatchSampler` to avoid that for
    map-style datasets); ``skip_first_batches`` picks the cheaper way by itself.

    Args:
        dataset: the dataset.
        skip_batches: batches to leave out at the start of every pass.
        use_stateful_dataloader: build it as a torchdata ``StatefulDataLoader`` (its
            ``state_dict`` counts the batches left out too).
        **kwargs: the other DataLoader arguments.
    """

    def __new__(cls, *args: Any, use_stateful_dataloader: bool = False, **kwargs: Any) -> Any:
        return super().__new__(stateful_class(cls) if use_stateful_dataloader else cls)

    def __init__(
        self,
        dataset: Any,
        skip_batches: int = 0,
        use_stateful_dataloader: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(dataset, **kwargs)
        self.skip_batches = skip_batches
        self.use_stateful_dataloader = bool(use_stateful_dataloader)

    def __len__(self) -> int:
        return max(0, super().__len__() - self.skip_batches)

    def __getattr__(self, name: str) -> Any:
        if name == "base_dataloader":  # Accelerate's adapter attribute: the loader itself
            return self
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        return itertools.islice(super().__iter__(), self.skip_batches, None)


def skip_first_batches(dataloader: DataLoader, num_batches: int = 0) -> DataLoader:
    """A loader yielding the batches of ``dataloader`` except the first ``num_batches``.

    For a prepared loader the result shares its epoch and seed, so it yields exactly the
    rest of the current epoch's shuffle order, and finishing it moves ``dataloader`` on to
    the next epoch. For a plain DataLoader the result uses the same sampler and generator,
    so from the same random state it shuffles as ``dataloader`` would.

    Args:
        dataloader: a prepared or plain DataLoader.
        num_batches: batches to leave out (counted in this process's batches).

    Returns:
        The skipping loader.
    """
    if not is_int(num_batches):
        raise TypeError(f"skip_first_batches(num_batches=...) must be an int, got {num_batches!r}.")
    if num_batches < 0:
        raise ValueError(f"skip_first_batches(num_batches={num_batches}) must not be negative.")
    if isinstance(dataloader, PreparedLoaderMixin):
        return dataloader.with_skip(dataloader.skip_batches + num_batches)
    if not isinstance(dataloader, DataLoader):
        raise TypeError(
            "skip_first_batches expects a torch.utils.data.DataLoader, "
            f"got {type(dataloader).__name__}."
        )
    kwargs = loader_kwargs(dataloader)
    kwargs["generator"] = dataloader.generator
    if dataloader.batch_sampler is not None and dataloader._dataset_kind == 0:  # map-style
        batch_sampler = SkipBatchSampler(dataloader.batch_sampler, num_batches)
        return DataLoader(dataloader.dataset, batch_sampler=batch_sampler, **kwargs)
    if dataloader.batch_sampler is None and dataloader._dataset_kind == 0:
        return SkipDataLoader(
            dataloader.dataset, num_batches, batch_size=None, sampler=dataloader.sampler, **kwargs
        )
    return SkipDataLoader(
        dataloader.dataset,
        num_batches,
        batch_size=dataloader.batch_size,
        drop_last=dataloader.drop_last,
        **kwargs,
    )
