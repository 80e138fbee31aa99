"""DataLoaderConfiguration: how ``prepare`` shards data loaders, validated on construction."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..validation import is_int

__all__ = ["DataLoaderConfiguration"]


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(
            f"DataLoaderConfiguration({name}=...) must be True or False, got {value!r}."
        )


@dataclasses.dataclass
class DataLoaderConfiguration:
    """How prepared data loaders split data between processes.

    Args:
        split_batches: keep the batch size the loader was built with and split each batch
            between the processes (it must divide by the number of processes); when False,
            every process takes whole batches and the global batch is ``batch_size * N``.
        dispatch_batches: process 0 iterates the loader and sends each process its slice.
            None means True for iterable datasets and False otherwise.
        even_batches: give every process the same number of batches by repeating samples
            from the start of the epoch; False lets the last batches be uneven.
        use_seedable_sampler: accepted for compatibility: nbaccel always replaces random
            samplers with a :class:`SeedableRandomSampler`, so shuffling never draws from the
            global random number generator.
        data_seed: seed of the shuffle order; None takes process 0's ``torch.initial_seed()``
            (what ``set_seed`` set).
        non_blocking: move batches to the device with ``non_blocking=True``.
        use_stateful_dataloader: build the prepared loaders as torchdata ``StatefulDataLoader``
            subclasses (``pip install torchdata``): their ``state_dict`` is torchdata's and
            ``load_state`` resumes mid-epoch without ``skip_first_batches``. Without it the
            loaders' ``state_dict`` is nbaccel's ``{"epoch", "batches_yielded", "seed"}``.
    """

    split_batches: bool = False
    dispatch_batches: bool | None = None
    even_batches: bool = True
    use_seedable_sampler: bool = False
    data_seed: int | None = None
    non_blocking: bool = False
    use_stateful_dataloader: bool = False

    def __post_init__(self) -> None:
        for name in (
            "split_batches",
            "even_batches",
            "use_seedable_sampler",
            "non_blocking",
            "use_stateful_dataloader",
        ):
            _check_bool(name, getattr(self, name))
        if self.dispatch_batches is not None:
            _check_bool("dispatch_batches", self.dispatch_batches)
        seed = self.data_seed
        if seed is not None:
            if not is_int(seed):
                raise TypeError(
                    "DataLoaderConfiguration(data_seed=...) must be an int or None, "
                    f"got {type(seed).__name__} ({seed!r})."
                )
            if not 0 <= seed < 2**63:
                raise ValueError(
                    f"DataLoaderConfiguration(data_seed={seed}) must be between 0 and 2**63 - 1."
                )

    def to_kwargs(self) -> dict[str, Any]:
        """The configuration as keyword arguments of :func:`prepare_data_loader`."""
        return dataclasses.asdict(self)
