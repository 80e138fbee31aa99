"""Reading and writing checkpoint files safely: safetensors for tensors, and
``torch.load(weights_only=True)`` for everything else, so loading never runs code."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save as safetensors_save

from .host import to_host
from .layout import atomic_file
from .tensorfile import TensorFile, read_into, read_metadata, tensor_files_written

__all__ = [
    "TIED_KEY",
    "dedupe_shared",
    "load_object",
    "load_tensors",
    "load_tensors_into",
    "not_readable",
    "read_tensors_into",
    "save_object",
    "save_tensors",
    "save_to",
    "storage_key",
    "tensor_file",
    "tensor_file_metadata",
]

TIED_KEY = "nbaccel_tied"


def storage_key(tensor: torch.Tensor) -> tuple[Any, ...]:
    """Identifies the memory a tensor views: equal keys mean the very same values."""
    return (
        tensor.device,
        tensor.untyped_storage().data_ptr(),
        tensor.storage_offset(),
        tuple(tensor.shape),
        tuple(tensor.stride()),
        tensor.dtype,
    )


def dedupe_shared(
    state_dict: dict[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Keep one name per shared tensor (tied weights); returns the tensors and alias -> kept.

    Tensors that share memory without being the same view are copied, since safetensors
    stores every tensor once and refuses overlapping ones.
    """
    state_dict = to_host(state_dict)
    kept: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    by_view: dict[tuple[Any, ...], str] = {}
    storages: set[tuple[Any, int]] = set()
    for name, tensor in state_dict.items():
        if tensor.device.type == "meta":
            raise ValueError(f"Cannot save {name!r}: it is on the meta device (it has no data).")
        key = storage_key(tensor)
        if key in by_view:
            aliases[name] = by_view[key]
            continue
        storage = (tensor.device, tensor.untyped_storage().data_ptr())
        if storage in storages and tensor.numel() > 0:
            tensor = tensor.clone()
        storages.add(storage)
        by_view[key] = name
        kept[name] = tensor if tensor.is_contiguous() else tensor.contiguous()
    return kept, aliases


def tensor_file(
    state_dict: dict[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None
) -> TensorFile:
    """``state_dict`` ready for :func:`~.tensorfile.tensor_files_written`: tied tensors kept
    once (their other names recorded in the metadata), every tensor contiguous."""
    tensors, aliases = dedupe_shared(state_dict)
    meta = {"format": "pt", **(metadata or {})}
    if aliases:
        meta[TIED_KEY] = json.dumps(aliases)
    return path, tensors, meta


def save_tensors(
    state_dict: dict[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None
) -> None:
    """Write ``state_dict`` as one safetensors file (tied tensors once), atomically."""
    with tensor_files_written([tensor_file(state_dict, path, metadata)]):
        pass


def not_readable(path: Path, error: BaseException, what: str) -> ValueError:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    detail = lines[-1][:300] if lines else ""
    return ValueError(
        f"The checkpoint file {path} is corrupt or not {what} ({type(error).__name__}: "
        f"{detail}). Load an earlier checkpoint, or save this one again."
    )


def _check_exists(path: Path) -> None:
    if not path.is_file():
        raise FileNotFoundError(
            f"The checkpoint file {path} is missing. Was the directory written by save_state() "
            "with the same models, optimizers, schedulers and registered objects?"
        )


def load_tensors(path: Path, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Read a safetensors file; names that were tied when saved get their shared tensor back."""
    _check_exists(path)
    try:
        with safe_open(os.fspath(path), framework="pt", device=str(device)) as handle:
            metadata = handle.metadata() or {}
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise not_readable(path, error, "a safetensors file") from error
    for alias, kept in json.loads(metadata.get(TIED_KEY, "{}")).items():
        tensors[alias] = tensors[kept]
    return tensors


def save_object(obj: Any, path: Path) -> None:
    """``torch.save`` ``obj`` atomically (it must hold only tensors and plain values)."""
    obj = to_host(obj)
    with atomic_file(path) as temporary:
        try:
            with open(temporary, "wb") as stream:
                torch.save(obj, stream)
        except (OSError, RuntimeError) as error:
            cause = error if isinstance(error, OSError) else error.__context__
            if isinstance(cause, OSError) and cause.errno is not None:
                raise OSError(
                    cause.errno, f"Could not write checkpoint file {path}: {cause.strerror}"
                ) from error
            raise


def load_object(path: Path, map_location: str | torch.device | None = "cpu") -> Any:
    """``torch.load(weights_only=True)``: tensors and plain containers only; never runs code."""
    _check_exists(path)
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:
        refused = [line.strip() for line in str(error).splitlines() if "GLOBAL" in line.upper()]
        if refused:
            raise ValueError(
                f"Refusing to load {path}: it holds objects other than tensors and plain "
                "Python values, and loading them could run code; nbaccel loads checkpoints "
                f"with torch.load(weights_only=True). ({refused[0]})"
            ) from error
        raise not_readable(path, error, "a torch.save file") from error


def read_tensors_into(
    path: Path, targets: Mapping[str, torch.Tensor]
) -> tuple[set[str], dict[str, torch.Tensor], dict[str, str]]:
    """:func:`~.tensorfile.read_into` with a missing or damaged file named in the error."""
    _check_exists(path)
    try:
        return read_into(path, targets, lambda: load_tensors(path))
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as error:
        if str(error).startswith(f"The checkpoint file {path} "):
            raise  # load_tensors named it already
        raise not_readable(path, error, "a safetensors file") from error


def tensor_file_metadata(path: Path) -> dict[str, str]:
    """The metadata of the safetensors file ``path``; a missing or damaged file is named."""
    _check_exists(path)
    try:
        return read_metadata(path)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as error:
        raise not_readable(path, error, "a safetensors file") from error


def load_tensors_into(
    path: Path, targets: dict[str, torch.Tensor]
) -> tuple[set[str], dict[str, torch.Tensor]]:
    """Read a safetensors file straight into the memory of ``targets`` where they are CPU
    tensors of the same dtype and shape; the other tensors are returned to be loaded.

    Returns:
        The names read in place, and the tensors read into new memory (by name).
    """
    done, rest, meta = read_tensors_into(path, targets)
    try:
        tied = dict(json.loads(meta.get(TIED_KEY, "{}")))
    except (ValueError, TypeError) as error:
        raise not_readable(path, error, "a safetensors file") from error
    for alias, kept in tied.items():
        if alias in targets and kept in targets:
            if kept in done and targets[alias].data_ptr() == targets[kept].data_ptr():
                done.add(alias)
            else:
                rest[alias] = rest.get(kept, targets[kept])
    return done, rest


def save_to(obj: Any, f: Any, safe_serialization: bool) -> None:
    """``torch.save`` of ``obj`` (or its tensors as safetensors) to a path or an open file."""
    if isinstance(f, (str, os.PathLike)):
        if safe_serialization:
            save_tensors(obj, Path(f))
        else:
            save_object(obj, Path(f))
    elif safe_serialization:
        tensors, _ = dedupe_shared(obj)
        f.write(safetensors_save(tensors, metadata={"format": "pt"}))
    else:
        torch.save(obj, f)
