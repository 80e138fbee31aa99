"""Model export in the Hugging Face layout (:mod:`.loading` reads it back into a model).

``save_model_files`` writes ``model.safetensors`` (or ``pytorch_model.bin``), or shards
``model-00001-of-00003.safetensors`` plus ``model.safetensors.index.json`` with its
``weight_map``, the files ``transformers`` and ``accelerate`` read. Tied weights are stored
once in safetensors files; a model that ties them gets them back shared.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from .files import dedupe_shared, save_object, save_tensors, storage_key
from .layout import atomic_file, make_dirs
from .simple import convert_file_size_to_int

__all__ = ["INDEX_NAMES", "SINGLE_NAMES", "parse_size", "save_model_files"]

# safe_serialization -> file name
INDEX_NAMES = {True: "model.safetensors.index.json", False: "pytorch_model.bin.index.json"}
SINGLE_NAMES = {True: "model.safetensors", False: "pytorch_model.bin"}


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
        return SINGLE_NAMES[safe]
    stem, extension = SINGLE_NAMES[safe].rsplit(".", 1)
    return f"{stem}-{index + 1:05d}-of-{count:05d}.{extension}"


def _remove_stale(directory: Path, safe: bool, keep: set[str]) -> None:
    """Delete weight files an earlier export left that this one did not write."""
    stem, extension = SINGLE_NAMES[safe].rsplit(".", 1)
    pattern = re.compile(
        rf"{stem}(-\d{{5}}-of-\d{{5}})?\.{extension}|{re.escape(INDEX_NAMES[safe])}"
    )
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
        with atomic_file(directory / INDEX_NAMES[safe_serialization]) as temporary:
            temporary.write_text(json.dumps(index, indent=2, sort_keys=True), encoding="utf-8")
        written.append(INDEX_NAMES[safe_serialization])
    _remove_stale(directory, safe_serialization, set(written))
    return written
