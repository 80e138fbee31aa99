"""Splitting inputs between processes: the arithmetic behind ``split_between_processes``."""

from __future__ import annotations

import copy
from collections.abc import Sized
from typing import Any, TypeVar

import torch

__all__ = ["split_for_process"]

T = TypeVar("T")


def _bounds(length: int, num_processes: int, index: int) -> tuple[int, int, int]:
    """Start, end and the largest share for ``index``; the first ranks take the remainder."""
    base, extra = divmod(length, num_processes)
    start = index * base + min(index, extra)
    end = start + base + (1 if index < extra else 0)
    return start, end, base + (1 if extra else 0)


def _pad(piece: Any, largest: int, whole: Any) -> Any:
    missing = largest - len(piece)
    if missing <= 0:
        return piece
    if len(whole) == 0:
        return piece
    filler = piece[-1:] if len(piece) else whole[-1:]
    if isinstance(piece, torch.Tensor):
        return torch.cat([piece, *([filler] * missing)], dim=0)
    if isinstance(piece, tuple):
        return piece + tuple(filler) * missing
    return list(piece) + list(filler) * missing


def _split_sequence(value: Any, num_processes: int, index: int, apply_padding: bool) -> Any:
    start, end, largest = _bounds(len(value), num_processes, index)
    piece = value[start:end]
    return _pad(piece, largest, value) if apply_padding else piece


def _length(name: str, value: Any) -> int:
    if isinstance(value, torch.Tensor):
        if value.dim() == 0:
            raise ValueError(f"split_between_processes: {name} is a 0-d tensor; it has no rows.")
        return int(value.shape[0])
    if isinstance(value, (list, tuple)):
        return len(value)
    raise TypeError(
        f"split_between_processes: {name} is a {type(value).__name__}; only lists, tuples and "
        "tensors can be split."
    )


def split_for_process(inputs: T, num_processes: int, index: int, apply_padding: bool = False) -> T:
    """The share of ``inputs`` that process ``index`` of ``num_processes`` receives.

    Lists and tuples are cut into contiguous runs, tensors along their first dimension, and
    dicts value by value (all values must have the same length). With ``apply_padding`` every
    share is as long as the largest one, padded by repeating the last element.

    Raises:
        TypeError: ``inputs`` is not a list, tuple, dict or tensor.
        ValueError: the values of a dict differ in length.
    """
    if num_processes == 1:
        return inputs
    if isinstance(inputs, dict):
        lengths = {str(k): _length(f"inputs[{k!r}]", v) for k, v in inputs.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(
                "split_between_processes: every value of a dict must have the same length, "
                f"got lengths {lengths}. Pad or trim the values first."
            )
        shares = copy.copy(inputs)  # keeps the mapping's own type (OrderedDict, defaultdict...)
        shares.clear()
        shares.update(
            (k, _split_sequence(v, num_processes, index, apply_padding)) for k, v in inputs.items()
        )
        return shares
    if isinstance(inputs, (list, tuple, torch.Tensor)):
        _length("inputs", inputs)
        return _split_sequence(inputs, num_processes, index, apply_padding)
    kind = type(inputs).__name__
    sized = " (it has a length, but cannot be sliced by rank)" if isinstance(inputs, Sized) else ""
    raise TypeError(
        f"split_between_processes(inputs=...) got a {kind}{sized}; pass a list, tuple, dict or "
        "torch.Tensor."
    )
