"""The safetensors format, written straight from the tensors' memory and read straight into
the memory that will keep the values (no intermediate ``bytes`` object, no second copy).

A file is an 8-byte little-endian header length, a JSON header (``{name: {"dtype", "shape",
"data_offsets"}}`` plus ``"__metadata__"``, a ``str -> str`` map), then the tensors' bytes
back to back. The bytes move through :mod:`.transfer` in large pieces on a few threads.
Reading parses JSON and copies bytes, nothing else: it never runs code from the file.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from . import transfer
from .layout import fsync_fds, fsync_file, partial_name, settle

__all__ = [
    "DTYPES",
    "TensorFile",
    "raw_bytes",
    "read_into",
    "read_metadata",
    "tensor_files_written",
]

TensorFile = tuple[Path, dict[str, torch.Tensor], dict[str, str]]
MAX_HEADER = 100 * 2**20  # the safetensors library's own limit

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
_FROM_NAME = {name: dtype for dtype, name in _DTYPES.items()}
DTYPES = frozenset(_DTYPES)  # what nbaccel's reader and writer handle themselves


def raw_bytes(tensor: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor, without copying them."""
    flat = tensor.detach().reshape(-1)
    if flat.dtype != torch.uint8:
        flat = flat.view(torch.uint8)
    return flat.numpy().data


# -- writing --------------------------------------------------------------------------------
def _header_bytes(tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> bytes:
    """Length and header for ``tensors`` stored in order, back to back."""
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
    return len(encoded).to_bytes(8, "little") + encoded


def _writable(tensors: dict[str, torch.Tensor]) -> bool:
    """Whether nbaccel's own writer handles every dtype (else the safetensors library)."""
    return all(t.dtype in _DTYPES for t in tensors.values())


def _named(error: OSError, path: Path) -> OSError:
    return OSError(error.errno, f"Could not write checkpoint file {path}: {error.strerror}")


def _abandon(pending: transfer.Pending) -> None:
    """Let the pieces still running finish; their errors no longer matter."""
    with contextlib.suppress(BaseException):
        pending.wait()


@contextlib.contextmanager
def tensor_files_written(files: list[TensorFile]) -> Iterator[None]:
    """Write safetensors files ``(path, contiguous tensors, metadata)`` in the background
    while the block runs. Each file appears under its name, complete and flushed to the
    disk, when the block ends; after an error no unfinished file is left behind. Write errors
    name the file."""
    opened: list[tuple[Path, Path, int]] = []  # final path, temporary, descriptor or -1
    per_file: list[list[transfer.Piece]] = []
    pending = transfer.start([], write=True)
    try:
        for path, tensors, meta in files:
            temporary = partial_name(path)
            if not _writable(tensors):  # other dtypes (fp8, ...): the library
                opened.append((path, temporary, -1))
                try:
                    save_file(tensors, os.fspath(temporary), metadata=meta)
                except OSError as error:
                    raise _named(error, path) from error
                continue
            try:  # 0o666: the process's umask applies, as with open()
                fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            except OSError as error:
                raise _named(error, path) from error
            opened.append((path, temporary, fd))
            prefix = _header_bytes(tensors, meta)
            pieces = transfer.pieces_of(fd, 0, memoryview(prefix), path)
            offset = len(prefix)
            for tensor in tensors.values():
                if tensor.numel():
                    data = raw_bytes(tensor.cpu())  # no copy for a CPU tensor
                    pieces += transfer.pieces_of(fd, offset, data, path)
                    offset += len(data)
            per_file.append(pieces)
        # a buffered write holds its file's lock: the threads work on different files
        pending = transfer.start(transfer.interleave(per_file), write=True)
        try:
            yield
        except BaseException:
            _abandon(pending)
            raise
        pending.wait()
        fsync_fds([fd for _, _, fd in opened if fd >= 0])  # on the disk before the rename
        for _, temporary, fd in opened:
            if fd < 0:
                fsync_file(temporary)
        while opened:
            path, temporary, fd = opened.pop(0)
            if fd >= 0:
                os.close(fd)
            os.replace(temporary, path)
            settle(path)
    finally:
        _abandon(pending)
        for _, temporary, fd in opened:
            if fd >= 0:
                os.close(fd)
            temporary.unlink(missing_ok=True)


# -- reading --------------------------------------------------------------------------------
def _header(fd: int, size: int) -> tuple[dict[str, Any], dict[str, str], int]:
    """The tensors' entries, the metadata and where the data starts; checked to fit."""
    length = int.from_bytes(os.pread(fd, 8, 0), "little")
    if not 2 <= length <= min(size - 8, MAX_HEADER):
        raise ValueError(f"header length {length} does not fit a file of {size} bytes")
    header = json.loads(os.pread(fd, length, 8))
    if not isinstance(header, dict):
        raise ValueError("the header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ValueError("the metadata is not a map of strings")
    return header, meta, 8 + length


def read_metadata(path: Path) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file (raises like :func:`read_into`)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return _header(fd, os.fstat(fd).st_size)[1]
    finally:
        os.close(fd)


def _entry(name: str, info: Any, room: int) -> tuple[str, tuple[int, ...], int, int]:
    """``info``'s dtype name, shape and data range, checked to lie inside the data."""
    shape, offsets = info["shape"], info["data_offsets"]
    if not (
        isinstance(info["dtype"], str)
        and all(type(n) is int and n >= 0 for n in shape)
        and len(offsets) == 2
        and all(type(n) is int for n in offsets)
        and 0 <= offsets[0] <= offsets[1] <= room
    ):
        raise ValueError(f"{name!r} has a malformed entry {str(info)[:200]}")
    return info["dtype"], tuple(shape), offsets[0], offsets[1]


def _fits(target: torch.Tensor | None, dtype: torch.dtype, shape: tuple[int, ...]) -> bool:
    return (
        target is not None
        and target.dtype == dtype
        and tuple(target.shape) == shape
        and target.device.type == "cpu"
        and target.is_contiguous()
    )


def read_into(
    path: Path,
    targets: Mapping[str, torch.Tensor],
    library: Callable[[], dict[str, torch.Tensor]],
) -> tuple[set[str], dict[str, torch.Tensor], dict[str, str]]:
    """Read a safetensors file straight into the memory of ``targets`` where they are CPU
    tensors of the same dtype and shape, and into new tensors for the others.

    Dtypes this reader does not know (fp8, ...) come from ``library()`` (the safetensors
    library's reading of the whole file). Raises OSError, ValueError, KeyError or TypeError
    for a damaged file; nothing is allocated beyond what the file holds.

    Returns:
        The names read in place, the tensors read into new memory, and the metadata.
    """
    done: set[str] = set()
    rest: dict[str, torch.Tensor] = {}
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        header, meta, start = _header(fd, size)
        pieces: list[transfer.Piece] = []
        whole: dict[str, torch.Tensor] | None = None
        for name, info in header.items():
            kind, shape, begin, end = _entry(name, info, size - start)
            dtype = _FROM_NAME.get(kind)
            if dtype is None:
                whole = library() if whole is None else whole
                rest[name] = whole[name]
                continue
            count = 1
            for n in shape:
                count *= n
            if end - begin != count * dtype.itemsize:
                raise ValueError(f"{name!r} has {end - begin} bytes for shape {list(shape)}")
            target = targets.get(name)
            if target is not None and _fits(target, dtype, shape):
                done.add(name)
            else:
                target = rest[name] = torch.empty(shape, dtype=dtype)
            if end > begin:
                pieces += transfer.pieces_of(fd, start + begin, raw_bytes(target), path)
        transfer.read_spans(pieces)
    finally:
        os.close(fd)
    return done, rest, meta
