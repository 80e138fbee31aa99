"""Optimizer states as safetensors: the tensors as the file's data, everything else (param
groups, hyperparameters, counters) as JSON in its metadata.

``optimizer.safetensors`` holds each tensor of ``optimizer.state_dict()`` under its path
(``state.0.exp_avg``, ``state.0.step``, ...) and, under the metadata key ``nbaccel_state``,
the state dict with every tensor replaced by ``{"T": name}``. Lists, tuples and dicts (whose
keys may be ints) are tagged so that they come back as the same types: ``{"L": [...]}``,
``{"U": [...]}``, ``{"D": [[key, value], ...]}``; infinite and NaN floats are ``{"F": "inf"}``;
None, booleans, ints, other floats and strings are plain JSON. Loading parses JSON and copies
bytes, so it never runs code from the file. It reads the tensors straight into the
optimizer's current state where shapes and dtypes match, and into new memory otherwise (an
optimizer that has not stepped yet, as in a fresh resume, has no state).

A state dict holding any other kind of value (a tensor subclass, a sparse tensor, a dtype the
format lacks, a NumPy scalar, ...) cannot be stored this way: :func:`optimizer_file` returns
None and the caller writes it with ``torch.save`` (``optimizer.bin``) instead.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .files import TIED_KEY, dedupe_shared, not_readable, read_tensors_into, tensor_file_metadata
from .tensorfile import DTYPES, TensorFile

__all__ = ["STATE_KEY", "decode_state", "encode_state", "load_optimizer_state", "optimizer_file"]

STATE_KEY = "nbaccel_state"
_PLAIN = (str, int, float, bool, type(None))
_TENSORS = (torch.Tensor, nn.Parameter)


class _Unsupported(TypeError):
    """A value the tagged JSON cannot hold."""


def _storable(tensor: torch.Tensor) -> bool:
    return (
        type(tensor) in _TENSORS
        and tensor.layout == torch.strided
        and tensor.dtype in DTYPES
        and not tensor.requires_grad
        and tensor.device.type != "meta"
    )


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _encode(value: Any, path: str, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        if not _storable(value):
            raise _Unsupported(f"{type(value).__name__} {value.dtype} at {path}")
        name = path if path not in tensors else f"{path}~{len(tensors)}"
        tensors[name] = value
        return {"T": name}
    if type(value) in _PLAIN:
        if type(value) is float and not math.isfinite(value):
            return {"F": repr(value)}  # strict JSON has no inf or nan
        return value
    if type(value) in (list, tuple):
        tag = "L" if type(value) is list else "U"
        return {tag: [_encode(v, _join(path, i), tensors) for i, v in enumerate(value)]}
    if type(value) is dict:
        pairs = []
        for key, item in value.items():
            if type(key) not in _PLAIN:
                raise _Unsupported(f"key {key!r} at {path}")
            pairs.append([_encode(key, path, {}), _encode(item, _join(path, key), tensors)])
        return {"D": pairs}
    raise _Unsupported(f"{type(value).__name__} at {path}")


def encode_state(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], str] | None:
    """The tensors of ``state`` by path, and the rest as tagged JSON; None when ``state``
    holds a kind of value the format cannot hold."""
    tensors: dict[str, torch.Tensor] = {}
    try:
        skeleton = _encode(state, "", tensors)
    except _Unsupported:
        return None
    return tensors, json.dumps(skeleton, separators=(",", ":"), allow_nan=False)


def optimizer_file(state: dict[str, Any], path: Path) -> TensorFile | None:
    """``state`` ready for :func:`~.tensorfile.tensor_files_written` (None: not storable)."""
    encoded = encode_state(state)
    if encoded is None:
        return None
    tensors, skeleton = encoded
    kept, aliases = dedupe_shared({name: t.detach() for name, t in tensors.items()})
    meta = {"format": "pt", STATE_KEY: skeleton}
    if aliases:
        meta[TIED_KEY] = json.dumps(aliases)
    return path, kept, meta


class _Ref:
    """A tensor of the file, before it is read."""

    def __init__(self, name: str) -> None:
        self.name = name


def _decode(value: Any, tensor: Callable[[str], Any]) -> Any:
    if type(value) in _PLAIN:
        return value
    if type(value) is not dict or len(value) != 1:
        raise ValueError(f"unexpected {str(value)[:100]} in the saved state")
    ((tag, body),) = value.items()
    if tag == "T" and type(body) is str:
        return tensor(body)
    if tag == "F" and body in ("inf", "-inf", "nan"):
        return float(body)
    if tag in ("L", "U") and type(body) is list:
        items = [_decode(v, tensor) for v in body]
        return items if tag == "L" else tuple(items)
    if tag == "D" and type(body) is list:
        return {_decode(k, tensor): _decode(v, tensor) for k, v in body}
    raise ValueError(f"unexpected {str(value)[:100]} in the saved state")


def decode_state(skeleton: str, tensors: dict[str, torch.Tensor]) -> Any:
    """The state dict that :func:`encode_state` encoded, given its tensors by name."""
    return _decode(json.loads(skeleton), tensors.__getitem__)


def _pair(saved: Any, current: Any, out: dict[str, torch.Tensor]) -> None:
    """The tensors of ``current`` at the places of ``saved``'s references, by name."""
    if isinstance(saved, _Ref):
        if type(current) in _TENSORS:
            out[saved.name] = current
    elif isinstance(saved, dict) and isinstance(current, dict):
        for key, value in saved.items():
            if key in current:
                _pair(value, current[key], out)
    elif isinstance(saved, (list, tuple)) and isinstance(current, (list, tuple)):
        for a, b in zip(saved, current, strict=False):  # equal lengths: see load_state_dict
            _pair(a, b, out)


def _targets(saved: Any, current: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The optimizer's own state tensors to read the saved values straight into: only when
    its param groups have the saved sizes (otherwise ``load_state_dict`` refuses, and the
    optimizer must be left as it was), and never two tensors that share memory."""
    try:
        sizes = [len(group["params"]) for group in saved["param_groups"]]
        if sizes != [len(group["params"]) for group in current["param_groups"]]:
            return {}
    except (KeyError, TypeError):
        return {}
    found: dict[str, torch.Tensor] = {}
    _pair(saved.get("state"), current.get("state"), found)
    owners: dict[int, str] = {}
    targets: dict[str, torch.Tensor] = {}
    for name, tensor in found.items():
        if tensor.device.type != "cpu":  # only CPU memory is read into (XLA has none to read)
            continue
        memory = tensor.untyped_storage().data_ptr()
        if memory in owners:
            targets.pop(owners[memory], None)
        else:
            owners[memory] = name
            targets[name] = tensor
    return targets


def load_optimizer_state(path: Path, current: dict[str, Any]) -> Any:
    """The state dict in the optimizer file ``path``, with its tensors read straight into
    those of ``current`` (the optimizer's state dict now) where they fit."""
    try:
        skeleton = json.loads(tensor_file_metadata(path)[STATE_KEY])
        saved = _decode(skeleton, _Ref)
        if not isinstance(saved, dict):
            raise TypeError("the saved state is not a dict")
    except (KeyError, ValueError, TypeError, RecursionError) as error:
        if str(error).startswith("The checkpoint file"):
            raise
        raise not_readable(path, error, "an optimizer state file") from error
    targets = _targets(saved, current)
    done, rest, meta = read_tensors_into(path, targets)
    try:
        tensors = {name: targets[name] for name in done} | rest
        for alias, kept in dict(json.loads(meta.get(TIED_KEY, "{}"))).items():
            tensors[alias] = tensors[kept]
        return _decode(skeleton, tensors.__getitem__)
    except (KeyError, ValueError, TypeError, RecursionError) as error:
        raise not_readable(path, error, "an optimizer state file") from error
