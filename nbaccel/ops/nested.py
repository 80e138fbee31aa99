"""Helpers that walk nested lists, tuples and dicts of tensors without any process group."""

from __future__ import annotations

import collections
import copy
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any

import torch

from ..validation import is_int

__all__ = [
    "concatenate",
    "convert_to_fp32",
    "find_batch_size",
    "find_device",
    "has_only_tensors",
    "honor_type",
    "ignorant_find_batch_size",
    "is_namedtuple",
    "is_torch_tensor",
    "listify",
    "merge_dicts",
    "recursively_apply",
    "send_to_device",
    "slice_tensors",
    "truncate",
]


def is_torch_tensor(tensor: Any) -> bool:
    """True when ``tensor`` is a ``torch.Tensor``."""
    return isinstance(tensor, torch.Tensor)


def is_namedtuple(data: Any) -> bool:
    """True when ``data`` is an instance of a ``collections.namedtuple`` (or typing.NamedTuple)."""
    return isinstance(data, tuple) and hasattr(data, "_asdict") and hasattr(data, "_fields")


def honor_type(obj: Any, generator: Iterable[Any]) -> Any:
    """Build an object of the same sequence type as ``obj`` from ``generator``.

    Namedtuples are rebuilt from positional fields; other tuples and lists from a list.
    """
    if is_namedtuple(obj):
        return type(obj)(*list(generator))
    return type(obj)(list(generator))


def _rebuild_mapping(data: Mapping[Any, Any], items: dict[Any, Any]) -> Any:
    """A mapping of the same type as ``data`` holding ``items``."""
    if isinstance(data, collections.defaultdict):
        return type(data)(data.default_factory, items)
    try:
        return type(data)(items)  # type: ignore[call-arg]
    except TypeError:
        if isinstance(data, MutableMapping):
            rebuilt = copy.copy(data)
            for key, value in items.items():
                rebuilt[key] = value
            return rebuilt
        return items


def recursively_apply(
    func: Callable[..., Any],
    data: Any,
    *args: Any,
    test_type: Callable[[Any], bool] = is_torch_tensor,
    error_on_other_type: bool = False,
    **kwargs: Any,
) -> Any:
    """Apply ``func`` to every leaf of ``data`` that passes ``test_type``.

    Lists, tuples (namedtuples included) and mappings are walked and rebuilt with their own type;
    other objects are returned unchanged.

    Args:
        func: called as ``func(leaf, *args, **kwargs)``.
        data: a leaf, or nested lists / tuples / dicts of leaves.
        *args: passed to ``func``.
        test_type: decides which objects are leaves for ``func``.
        error_on_other_type: raise ``TypeError`` on an object that is neither a container nor a
            leaf, instead of returning it unchanged.
        **kwargs: passed to ``func``.

    Returns:
        The same structure with every leaf replaced by ``func``'s result.

    Raises:
        TypeError: with ``error_on_other_type``, on a leaf that ``test_type`` rejects.
    """
    if isinstance(data, (tuple, list)):
        return honor_type(
            data,
            (
                recursively_apply(
                    func, o, *args, test_type=test_type,
                    error_on_other_type=error_on_other_type, **kwargs,
                )
                for o in data
            ),
        )  # fmt: skip
    if isinstance(data, Mapping):
        items = {
            k: recursively_apply(
                func, v, *args, test_type=test_type,
                error_on_other_type=error_on_other_type, **kwargs,
            )
            for k, v in data.items()
        }  # fmt: skip
        return _rebuild_mapping(data, items)
    if test_type(data):
        return func(data, *args, **kwargs)
    if error_on_other_type:
        name = getattr(func, "__name__", repr(func))
        raise TypeError(  # Accelerate's wording, which code may match
            f"Unsupported types ({type(data)}) passed to `{name}`. Only nested list/tuple/dicts "
            f"of objects that are valid for `{test_type.__name__}` should be passed."
        )
    return data


def _short_repr(obj: Any, limit: int = 60) -> str:
    text = repr(obj)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def has_only_tensors(data: Any) -> bool:
    """True when every leaf of the nested ``data`` is a tensor (and there is at least one)."""
    found = False

    def visit(tensor: torch.Tensor) -> None:
        nonlocal found
        found = True

    try:
        recursively_apply(visit, data, error_on_other_type=True)
    except TypeError:
        return False
    return found


def send_to_device(
    tensor: Any,
    device: torch.device | str | int,
    non_blocking: bool = False,
    skip_keys: str | list[str] | tuple[str, ...] | None = None,
) -> Any:
    """Move every tensor (and every object with a ``.to`` method) in nested ``tensor`` to
    ``device``.

    Args:
        tensor: nested lists / tuples / dicts of tensors or objects with ``.to``.
        device: where to move them.
        non_blocking: passed to ``.to`` where it is accepted.
        skip_keys: dictionary keys whose values stay where they are.

    Returns:
        The same structure, moved. Other objects are returned unchanged.
    """
    if is_torch_tensor(tensor) or hasattr(tensor, "to"):
        try:
            return tensor.to(device, non_blocking=non_blocking)
        except TypeError:  # a .to that does not take non_blocking
            return tensor.to(device)
    if isinstance(tensor, (tuple, list)):
        return honor_type(
            tensor, (send_to_device(t, device, non_blocking, skip_keys) for t in tensor)
        )
    if isinstance(tensor, Mapping):
        skip = [skip_keys] if isinstance(skip_keys, str) else list(skip_keys or [])
        items = {
            k: v if k in skip else send_to_device(v, device, non_blocking, skip_keys)
            for k, v in tensor.items()
        }
        return _rebuild_mapping(tensor, items)
    return tensor


def find_batch_size(data: Any) -> int:
    """The size of the first dimension of the first tensor found in nested ``data``.

    Raises:
        ValueError: ``data`` is an empty list, tuple or dict.
        TypeError: the first leaf is not a tensor.
    """
    if isinstance(data, (tuple, list, Mapping)):
        if len(data) == 0:
            raise ValueError(
                f"find_batch_size got an empty {type(data).__name__}: there is no tensor to read "
                "the batch size from."
            )
        first = next(iter(data.values())) if isinstance(data, Mapping) else data[0]
        return find_batch_size(first)
    if not is_torch_tensor(data):
        raise TypeError(
            f"find_batch_size can only read the batch size of tensors, got "
            f"{type(data).__name__} ({_short_repr(data)})."
        )
    if data.ndim == 0:
        raise ValueError("find_batch_size got a 0-d tensor: it has no batch dimension.")
    return int(data.shape[0])


def ignorant_find_batch_size(data: Any) -> int | None:
    """Like :func:`find_batch_size`, but None where no batch size can be found."""
    try:
        return find_batch_size(data)
    except (ValueError, TypeError):
        return None


def find_device(data: Any) -> torch.device | None:
    """The device of the first tensor in nested ``data``, or None when there is none."""
    if isinstance(data, Mapping):
        data = list(data.values())
    if isinstance(data, (tuple, list)):
        for item in data:
            device = find_device(item)
            if device is not None:
                return device
        return None
    return data.device if is_torch_tensor(data) else None


def slice_tensors(
    data: Any, tensor_slice: Any, process_index: int | None = None, num_processes: int | None = None
) -> Any:
    """Index every tensor of nested ``data`` with ``tensor_slice`` (a slice, int, or index).
    ``process_index`` and ``num_processes`` are accepted as in Accelerate and not used."""

    def _slice(tensor: torch.Tensor, index: Any) -> torch.Tensor:
        return tensor[index]

    return recursively_apply(_slice, data, tensor_slice)


def concatenate(data: list[Any] | tuple[Any, ...], dim: int = 0) -> Any:
    """Concatenate a list of same-structured nested data along ``dim``.

    ``concatenate([{"x": a1}, {"x": a2}])`` is ``{"x": torch.cat([a1, a2])}``. A list of one
    non-tensor (``[None]``, ``["text"]``) gives that object back unchanged, as in Accelerate.

    Raises:
        ValueError: ``data`` is empty.
        TypeError: ``data`` is not a list or tuple, or its leaves are not tensors.
    """
    if not isinstance(data, (list, tuple)):
        raise TypeError(
            f"concatenate expects a list of nested tensors to join, got {type(data).__name__}."
        )
    if len(data) == 0:
        raise ValueError("concatenate got an empty list: there is nothing to concatenate.")
    first = data[0]
    if isinstance(first, (tuple, list)):
        return honor_type(
            first, (concatenate([d[i] for d in data], dim=dim) for i in range(len(first)))
        )
    if isinstance(first, Mapping):
        return _rebuild_mapping(first, {k: concatenate([d[k] for d in data], dim) for k in first})
    if not is_torch_tensor(first):
        if len(data) == 1:  # a lone non-tensor has nothing to join: returned as it is
            return first
        raise TypeError(
            f"concatenate can only join tensors, got {type(first).__name__} ({_short_repr(first)})."
        )
    return torch.cat(list(data), dim=dim)


def listify(data: Any) -> Any:
    """Turn every tensor of nested ``data`` into Python numbers and lists (``tensor.tolist()``)."""

    def _to_list(tensor: torch.Tensor) -> Any:
        tensor = tensor.detach()
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.to(torch.float32)
        return tensor.cpu().tolist()

    return recursively_apply(_to_list, data)


def _is_half_tensor(data: Any) -> bool:
    return is_torch_tensor(data) and data.dtype in (torch.float16, torch.bfloat16)


def convert_to_fp32(tensor: Any) -> Any:
    """Cast every float16 / bfloat16 tensor of nested ``tensor`` to float32; the rest is kept."""

    def _to_fp32(leaf: torch.Tensor) -> torch.Tensor:
        return leaf.float()

    return recursively_apply(_to_fp32, tensor, test_type=_is_half_tensor)


def truncate(data: Any, num_samples: int) -> Any:
    """Keep the first ``num_samples`` samples of gathered ``data``.

    This is what ``gather_for_metrics`` does with the last global batch: the data loader
    repeated samples to give every process a full batch, and only the first ``num_samples``
    (the loader's remainder) are real.

    - When every leaf of ``data`` is a tensor, each tensor is cut to its first ``num_samples``
      rows (dim 0); the structure is kept.
    - Otherwise ``data`` must be a list or tuple of samples (what :func:`gather_object`
      returns) and the first ``num_samples`` elements are kept.

    ``num_samples`` larger than the data keeps everything.

    Raises:
        ValueError: ``num_samples`` is negative.
        TypeError: ``num_samples`` is not an int, or ``data`` is neither.
    """
    if not is_int(num_samples):
        raise TypeError(
            f"truncate(num_samples=...) must be an int, got {type(num_samples).__name__} "
            f"({num_samples!r})."
        )
    if num_samples < 0:
        raise ValueError(f"truncate(num_samples={num_samples}) must be 0 or more.")
    if has_only_tensors(data):
        return slice_tensors(data, slice(0, num_samples))
    if isinstance(data, (list, tuple)):
        return data[:num_samples]
    raise TypeError(
        f"truncate expects nested tensors or a list of samples, got {type(data).__name__} "
        f"({_short_repr(data)})."
    )


def merge_dicts(source: dict[Any, Any], destination: dict[Any, Any]) -> dict[Any, Any]:
    """Merge nested dict ``source`` into ``destination`` (in place; returned)."""
    for key, value in source.items():
        if isinstance(value, dict):
            merge_dicts(value, destination.setdefault(key, {}))
        else:
            destination[key] = value
    return destination
