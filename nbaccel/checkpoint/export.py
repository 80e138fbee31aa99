"""Model export in the Hugging Face layout, and loading such exports into a model.

``save_model_files`` writes ``model.safetensors`` (or ``pytorch_model.bin``), or shards
``model-00001-of-00003.safetensors`` plus ``model.safetensors.index.json`` with its
``weight_map``, the files ``transformers`` and ``accelerate`` read. Tied weights are stored
once in safetensors files; a model that ties them gets them back shared.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..modeling import find_tied_parameters, retie_parameters
from .files import dedupe_shared, load_object, load_tensors, save_object, save_tensors, storage_key
from .layout import atomic_file, make_dirs
from .simple import convert_file_size_to_int

__all__ = ["load_checkpoint_in_model", "parse_size", "save_model_files"]

_INDEX = {True: "model.safetensors.index.json", False: "pytorch_model.bin.index.json"}
_SINGLE = {True: "model.safetensors", False: "pytorch_model.bin"}


def parse_size(size: int | str) -> int:
    """Bytes in ``max_shard_size``: a positive int, or a string such as ``"10GB"`` (10**9) or
    ``"5GiB"`` (2**30), read by :func:`convert_file_size_to_int`."""
    try:
        value = 0 if isinstance(size, bool) else convert_file_size_to_int(size)
    except (ValueError, TypeError):
        value = 0
    if value <= 0:
        raise ValueError(
            f"max_shard_size={size!r} is not a size; give bytes as a positive int or a string "
            "such as '500MB', '10GB' or '2GiB'."
        )
    return value


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _shards(state_dict: dict[str, torch.Tensor], limit: int) -> list[dict[str, torch.Tensor]]:
    """Split in order into shards of at most ``limit`` bytes (a bigger tensor gets its own);
    a tensor sharing memory with an earlier one goes in that one's shard at no cost."""
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    home: dict[tuple[Any, ...], int] = {}
    for name, tensor in state_dict.items():
        key = storage_key(tensor)
        if key in home:
            shards[home[key]][name] = tensor
            continue
        if shards[-1] and size + _nbytes(tensor) > limit:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += _nbytes(tensor)
        home[key] = len(shards) - 1
    return shards


def _shard_name(safe: bool, index: int, count: int) -> str:
    if count == 1:
        return _SINGLE[safe]
    stem, extension = _SINGLE[safe].rsplit(".", 1)
    return f"{stem}-{index + 1:05d}-of-{count:05d}.{extension}"


def _remove_stale(directory: Path, safe: bool, keep: set[str]) -> None:
    """Delete weight files an earlier export left that this one did not write."""
    stem, extension = _SINGLE[safe].rsplit(".", 1)
    pattern = re.compile(rf"{stem}(-\d{{5}}-of-\d{{5}})?\.{extension}|{re.escape(_INDEX[safe])}")
    for entry in directory.iterdir():
        if pattern.fullmatch(entry.name) and entry.name not in keep and entry.is_file():
            entry.unlink()


def save_model_files(
    state_dict: dict[str, torch.Tensor],
    directory: Path,
    max_shard_size: int | str = "10GB",
    safe_serialization: bool = True,
) -> list[str]:
    """Write ``state_dict`` into ``directory`` as one file or shards plus an index.

    Returns:
        The names of the files written.
    """
    limit = parse_size(max_shard_size)
    if directory.is_file():
        raise ValueError(f"save_model: {directory} is a file; give a directory.")
    make_dirs(directory)
    if safe_serialization:
        state_dict, _ = dedupe_shared(state_dict)
    shards = _shards(state_dict, limit)
    names = [_shard_name(safe_serialization, i, len(shards)) for i in range(len(shards))]
    for name, shard in zip(names, shards, strict=True):
        if safe_serialization:
            save_tensors(shard, directory / name)
        else:
            save_object(shard, directory / name)
    written = list(names)
    if len(shards) > 1:
        unique = {storage_key(t): _nbytes(t) for t in state_dict.values()}
        index = {
            "metadata": {"total_size": sum(unique.values())},
            "weight_map": {
                key: name for name, shard in zip(names, shards, strict=True) for key in shard
            },
        }
        with atomic_file(directory / _INDEX[safe_serialization]) as temporary:
            temporary.write_text(json.dumps(index, indent=2, sort_keys=True), encoding="utf-8")
        written.append(_INDEX[safe_serialization])
    _remove_stale(directory, safe_serialization, set(written))
    return written


def _checkpoint_files(checkpoint: str | Path) -> list[Path]:
    """The weight files of a file, an index file or an export directory."""
    path = Path(checkpoint)
    if path.is_dir():
        for candidate in (*_INDEX.values(), *_SINGLE.values()):
            if (path / candidate).is_file():
                return _checkpoint_files(path / candidate)
        names = [*_INDEX.values(), *_SINGLE.values()]
        raise FileNotFoundError(
            f"load_checkpoint_in_model: {path} holds none of {names}; pass the directory "
            "save_model wrote, one weights file, or an index file."
        )
    if not path.is_file():
        raise FileNotFoundError(f"load_checkpoint_in_model: {path} does not exist.")
    if path.name.endswith(".json"):
        try:
            weight_map = json.loads(path.read_text(encoding="utf-8"))["weight_map"]
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f"The index {path} is corrupt: it has no readable 'weight_map' ({error})."
            ) from error
        return [path.parent / name for name in dict.fromkeys(weight_map.values())]
    return [path]


def _read(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        return load_tensors(path)
    return dict(load_object(path))


def _device_for(name: str, device_map: dict[str, Any] | None) -> torch.device | None:
    if device_map is None:
        return None
    matches = [k for k in device_map if k == "" or name == k or name.startswith(k + ".")]
    if not matches:
        raise ValueError(
            f"load_checkpoint_in_model: device_map does not place {name!r}; add its module (or "
            "'' for the whole model)."
        )
    device = device_map[max(matches, key=len)]
    if device == "disk":
        raise NotImplementedError(
            "load_checkpoint_in_model: offloading to 'disk' is not supported by nbaccel; map "
            "every module to a device."
        )
    return torch.device(f"cuda:{device}" if isinstance(device, int) else device)


def _assign(
    model: nn.Module, name: str, value: torch.Tensor, device: torch.device | None, dtype: Any
) -> None:
    path, _, attr = name.rpartition(".")
    module = model.get_submodule(path) if path else model
    is_param = attr in module._parameters
    current = module._parameters[attr] if is_param else module._buffers[attr]
    assert current is not None
    meta = current.device.type == "meta"
    if tuple(current.shape) != tuple(value.shape):
        raise ValueError(
            f"load_checkpoint_in_model: {name!r} has shape {tuple(value.shape)} in the "
            f"checkpoint but {tuple(current.shape)} in the model."
        )
    target_device = device or (torch.device("cpu") if meta else current.device)
    target_dtype = value.dtype
    if value.is_floating_point():
        target_dtype = dtype if dtype is not None else current.dtype
    if not meta and current.device == target_device and current.dtype == target_dtype:
        with torch.no_grad():
            current.copy_(value)  # in place: the same object, so ties and references hold
        return
    new = value.to(device=target_device, dtype=target_dtype)
    if is_param:
        module._parameters[attr] = nn.Parameter(new, requires_grad=current.requires_grad)
    else:
        module._buffers[attr] = new


def load_checkpoint_in_model(
    model: nn.Module,
    checkpoint: str | Path,
    device_map: dict[str, Any] | None = None,
    offload_folder: str | None = None,
    dtype: str | torch.dtype | None = None,
    offload_state_dict: bool = False,
    offload_buffers: bool = False,
    keep_in_fp32_modules: list[str] | None = None,
    offload_8bit_bnb: bool = False,
    strict: bool = False,
    full_state_dict: bool = True,
    broadcast_from_rank0: bool = False,
) -> None:
    """Load a checkpoint (one file, a sharded directory or an index) into ``model``.

    Args:
        model: the model (not wrapped); its parameters are filled in place where device and
            dtype already match, so tied weights stay tied.
        checkpoint: a ``.safetensors`` / ``.bin`` file, an index ``.json``, or a directory
            written by ``save_model``.
        device_map: module name -> device (``{"": device}`` puts everything on ``device``).
        offload_folder, offload_state_dict, offload_buffers, offload_8bit_bnb,
            full_state_dict, broadcast_from_rank0: accepted for compatibility; disk offload
            is not supported.
        dtype: cast floating-point weights to this dtype.
        keep_in_fp32_modules: modules whose floating-point weights stay in float32.
        strict: raise when the checkpoint and the model do not have the same keys (else warn).
    """
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype.replace("torch.", ""))
    expected = set(model.state_dict().keys())
    tied = find_tied_parameters(model)
    loaded: set[str] = set()
    unexpected: set[str] = set()
    for path in _checkpoint_files(checkpoint):
        for name, value in _read(path).items():
            if name not in expected:
                unexpected.add(name)
                continue
            keep_fp32 = any(
                name == m or name.startswith(m + ".") for m in keep_in_fp32_modules or []
            )
            cast = torch.float32 if keep_fp32 and value.is_floating_point() else dtype
            _assign(model, name, value, _device_for(name, device_map), cast)
            loaded.add(name)
    if tied:
        retie_parameters(model, tied)
    covered = {n for group in tied if loaded & set(group) for n in group}
    missing = sorted(expected - loaded - covered)
    if missing or unexpected:
        extra = sorted(unexpected)
        text = (
            f"load_checkpoint_in_model({checkpoint}): missing keys {missing[:10]}"
            f"{'...' if len(missing) > 10 else ''}, unexpected keys {extra[:10]}"
            f"{'...' if len(extra) > 10 else ''}."
        )
        if strict:
            raise RuntimeError(text)
        warnings.warn(text, stacklevel=2)
