"""Helpers on nested batches: device placement, length, concatenation and slicing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["batch_length", "concat_batches", "send_to_device", "slice_batch"]


def _is_structure(value: Any) -> bool:
    return isinstance(value, (torch.Tensor, np.ndarray, Mapping, list, tuple))


def _is_sample_list(value: Any) -> bool:
    """A list/tuple of plain samples (strings, numbers, ...) rather than a tuple of fields."""
    return isinstance(value, (list, tuple)) and not all(_is_structure(v) for v in value)


def _rebuild(template: Any, items: list[Any]) -> Any:
    if isinstance(template, tuple) and hasattr(template, "_fields"):  # namedtuple
        return type(template)(*items)
    return type(template)(items)


def _rebuild_mapping(template: Mapping[Any, Any], items: dict[Any, Any]) -> Any:
    """``items`` in the mapping type of ``template``, or the plain dict when that type cannot
    be built from one."""
    try:
        return type(template)(items)  # type: ignore[call-arg]
    except TypeError:
        return items


def send_to_device(batch: Any, device: torch.device | str, non_blocking: bool = False) -> Any:
    """Move every tensor in a nested batch to ``device``.

    Args:
        batch: a tensor, or a mapping / list / tuple (namedtuples included) nesting tensors;
            other values, and objects with a ``to`` method, are handled as well.
        device: where the tensors go.
        non_blocking: passed to ``Tensor.to``.

    Returns:
        The same structure with its tensors on ``device``.
    """
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        return _rebuild_mapping(
            batch, {k: send_to_device(v, device, non_blocking) for k, v in batch.items()}
        )
    if isinstance(batch, (list, tuple)):
        return _rebuild(batch, [send_to_device(v, device, non_blocking) for v in batch])
    to = getattr(batch, "to", None)
    if callable(to):
        try:
            return to(device, non_blocking=non_blocking)
        except TypeError:
            return to(device)
    return batch


def batch_length(batch: Any) -> int:
    """Number of samples in a nested batch (the leading size of its first tensor or list)."""
    if isinstance(batch, (torch.Tensor, np.ndarray)):
        return int(batch.shape[0])
    if isinstance(batch, Mapping):
        for value in batch.values():
            return batch_length(value)
    elif isinstance(batch, (list, tuple)):
        if _is_sample_list(batch) or not batch:
            return len(batch)
        return batch_length(batch[0])
    raise TypeError(
        f"cannot tell how many samples a batch of type {type(batch).__name__} holds: batches "
        "must be tensors, arrays, or lists/tuples/dicts of them. Pass slice_fn_for_dispatch "
        "to prepare_data_loader for other batch types."
    )


def concat_batches(batches: Sequence[Any]) -> Any:
    """Join batches of the same structure along the sample dimension."""
    first = batches[0]
    if len(batches) == 1:
        return first
    if isinstance(first, torch.Tensor):
        return torch.cat(list(batches), dim=0)
    if isinstance(first, np.ndarray):
        return np.concatenate(list(batches), axis=0)
    if isinstance(first, Mapping):
        joined = {k: concat_batches([b[k] for b in batches]) for k in first}
        try:
            return type(first)(joined)  # type: ignore[call-arg]
        except TypeError:
            return joined
    if isinstance(first, (list, tuple)):
        if _is_sample_list(first):
            return _rebuild(first, [item for b in batches for item in b])
        return _rebuild(first, [concat_batches([b[i] for b in batches]) for i in range(len(first))])
    if all(b == first for b in batches[1:]):  # a value shared by the batch (a string...)
        return first
    raise TypeError(f"cannot concatenate batches of type {type(first).__name__}.")


def slice_batch(batch: Any, start: int, stop: int) -> Any:
    """The samples ``start:stop`` of a nested batch."""
    if isinstance(batch, (torch.Tensor, np.ndarray)):
        return batch[start:stop]
    if isinstance(batch, Mapping):
        return _rebuild_mapping(batch, {k: slice_batch(v, start, stop) for k, v in batch.items()})
    if isinstance(batch, (list, tuple)):
        if _is_sample_list(batch):
            return _rebuild(batch, list(batch[start:stop]))
        return _rebuild(batch, [slice_batch(v, start, stop) for v in batch])
    return batch  # not per-sample data (a string, a number...): every slice keeps it
