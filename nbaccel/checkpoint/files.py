"""Reading and writing checkpoint files safely: safetensors for tensors, and
``torch.load(weights_only=True)`` for everything else, so loading never runs code."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from .layout import atomic_file

__all__ = [
    "TIED_KEY",
    "dedupe_shared",
    "load_object",
    "load_tensors",
    "save_object",
    "save_tensors",
    "storage_key",
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


_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


def _raw_bytes(tensor: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor, without copying them."""
    flat = tensor.detach().reshape(-1)
    if flat.dtype != torch.uint8:
        flat = flat.view(torch.uint8)
    return flat.numpy().data


def _write_safetensors(tensors: dict[str, torch.Tensor], path: Path, meta: dict[str, str]) -> None:
    """The safetensors format, written straight from the tensors' memory (no copies)."""
    header: dict[str, Any] = {"__metadata__": meta}
    offset = 0
    for name, tensor in tensors.items():
        size = tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": _DTYPES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as handle:
        handle.write(len(encoded).to_bytes(8, "little"))
        handle.write(encoded)
        for tensor in tensors.values():
            if tensor.numel():
                handle.write(_raw_bytes(tensor))


def save_tensors(
    state_dict: dict[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None
) -> None:
    """Write ``state_dict`` as one safetensors file (tied tensors once), atomically."""
    tensors, aliases = dedupe_shared(state_dict)
    meta = {"format": "pt", **(metadata or {})}
    if aliases:
        meta[TIED_KEY] = json.dumps(aliases)
    with atomic_file(path) as temporary:
        if all(t.device.type == "cpu" and t.dtype in _DTYPES for t in tensors.values()):
            _write_safetensors(tensors, temporary, meta)
        else:  # other devices and dtypes (fp8, ...): the library copies them to the CPU
            save_file(tensors, os.fspath(temporary), metadata=meta)


def _not_readable(path: Path, error: BaseException, what: str) -> ValueError:
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
        raise _not_readable(path, error, "a safetensors file") from error
    for alias, kept in json.loads(metadata.get(TIED_KEY, "{}")).items():
        tensors[alias] = tensors[kept]
    return tensors


def save_object(obj: Any, path: Path) -> None:
    """``torch.save`` ``obj`` atomically (it must hold only tensors and plain values)."""
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
        raise _not_readable(path, error, "a torch.save file") from error


_FROM_NAME = {name: dtype for dtype, name in _DTYPES.items()}


def _header(handle: Any, path: Path, size: int) -> tuple[dict[str, Any], int]:
    length = int.from_bytes(handle.read(8), "little")
    if not 2 <= length <= size - 8:
        raise ValueError(f"header length {length} does not fit a file of {size} bytes")
    header = json.loads(handle.read(length))
    start = 8 + length
    for name, info in header.items():
        if name != "__metadata__" and not start + info["data_offsets"][1] <= size:
            raise ValueError(f"{name!r} ends past the end of the file")
    return header, start


def _read_exactly(handle: Any, view: memoryview) -> None:
    done = 0
    while done < len(view):
        count = handle.readinto(view[done:])
        if not count:
            raise ValueError("the file ends early")
        done += count


def load_tensors_into(
    path: Path, targets: dict[str, torch.Tensor]
) -> tuple[set[str], dict[str, torch.Tensor]]:
    """Read a safetensors file straight into the memory of ``targets`` where they are CPU
    tensors of the same dtype and shape; the other tensors are returned to be loaded.

    Returns:
        The names read in place, and the tensors read into new memory (by name).
    """
    _check_exists(path)
    done: set[str] = set()
    rest: dict[str, torch.Tensor] = {}
    try:
        with open(path, "rb", buffering=0) as handle:
            header, start = _header(handle, path, path.stat().st_size)
            meta = header.pop("__metadata__", None) or {}
            for name, info in header.items():
                dtype, shape = _FROM_NAME.get(info["dtype"]), tuple(info["shape"])
                if dtype is None:  # a dtype this reader does not know (fp8, ...)
                    rest[name] = load_tensors(path)[name]
                    continue
                target = targets.get(name)
                fits = (
                    target is not None
                    and dtype == target.dtype
                    and shape == tuple(target.shape)
                    and target.device.type == "cpu"
                    and target.is_contiguous()
                )
                if target is None or not fits:
                    target = rest[name] = torch.empty(shape, dtype=dtype)
                else:
                    done.add(name)
                begin, end = info["data_offsets"]
                if end - begin != target.numel() * target.element_size():
                    raise ValueError(f"{name!r} has {end - begin} bytes for shape {shape}")
                if end > begin:
                    handle.seek(start + begin)
                    with torch.no_grad():
                        _read_exactly(handle, _raw_bytes(target))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise _not_readable(path, error, "a safetensors file") from error
    for alias, kept in json.loads(meta.get(TIED_KEY, "{}")).items():
        if alias in targets and kept in targets:
            if kept in done and targets[alias].data_ptr() == targets[kept].data_ptr():
                done.add(alias)
            else:
                rest[alias] = rest.get(kept, targets[kept])
    return done, rest
