"""A worker's note of the collective it is in, kept in a page of memory its launcher reads too.

A rank that dies inside a collective (gloo aborts it on mismatched shapes, a signal kills it)
cannot answer "where are you?" any more. So before a tracked collective enters torch's C++
code, the worker writes what it is (its kind, its number on its group, the group's ranks and
the shapes and dtypes it sends) into a small shared page with one ``pack_into``: no message,
no formatting. Its launcher keeps the same page mapped and reads it when the rank ended
without a reply, to name the collective it died in. The layout is here, once, for both sides.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import time
from collections.abc import Sequence
from typing import Any

from .location import CollectiveCall

__all__ = [
    "NOTE_SIZE",
    "OPS",
    "NotePage",
    "call_from_json",
    "call_to_json",
    "read_note",
]

# the collectives a note can name, by index (worker/collectives.py tracks these)
OPS = (
    "all_reduce",
    "all_reduce_coalesced",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "all_gather_coalesced",
    "all_gather_object",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "monitored_barrier",
)
DTYPES = (
    "float32",
    "float16",
    "bfloat16",
    "float64",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
    "complex64",
    "complex128",
    "float8_e4m3fn",
    "float8_e5m2",
)
MAX_RANKS = 64  # a bigger group is noted by its size alone
MAX_TENSORS = 4
MAX_DIMS = 6

EMPTY, INSIDE, QUEUED = 0, 1, 2
# state, op, seq, start (wall clock), world?, group size, ranks noted, tensors noted
_HEAD = struct.Struct("<BBQdBHHH")
_RANKS = struct.Struct(f"<{MAX_RANKS}i")
_TENSOR = struct.Struct(f"<BB{MAX_DIMS}q")
NOTE_SIZE = mmap.PAGESIZE
_TENSORS_AT = _HEAD.size + _RANKS.size
assert _TENSORS_AT + MAX_TENSORS * _TENSOR.size <= NOTE_SIZE


class NotePage:
    """One rank's page: created by the launcher (:meth:`create`), mapped in the worker from
    the descriptor it inherits (:meth:`open`)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.map = mmap.mmap(fd, NOTE_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    @classmethod
    def create(cls) -> NotePage:
        """A new zeroed page (a memfd: nothing on disk, gone with its last holder)."""
        fd = os.memfd_create("nbaccel-note", 0)
        try:
            os.ftruncate(fd, NOTE_SIZE)
            return cls(fd)
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def open(cls, fd: int) -> NotePage:
        """The worker's side: map the page, then close the descriptor (the map stays)."""
        page = cls(fd)
        page.close_fd()
        return page

    def entered(
        self,
        op: int,
        seq: int,
        world: bool,
        ranks: Sequence[int],
        tensors: Sequence[tuple[tuple[int, ...], int]],
    ) -> None:
        """Note a collective about to run (``tensors``: each one's shape and dtype index)."""
        shown = ranks if len(ranks) <= MAX_RANKS else ()
        for at, (shape, dtype) in enumerate(tensors[:MAX_TENSORS]):
            dims = tuple(shape[:MAX_DIMS]) + (0,) * (MAX_DIMS - min(len(shape), MAX_DIMS))
            _TENSOR.pack_into(self.map, _TENSORS_AT + at * _TENSOR.size, len(shape), dtype, *dims)
        if shown:
            padded = tuple(shown) + (0,) * (MAX_RANKS - len(shown))
            _RANKS.pack_into(self.map, _HEAD.size, *padded)
        count = min(len(tensors), MAX_TENSORS)
        _HEAD.pack_into(
            self.map, 0, INSIDE, op, seq, time.time(), world, len(ranks), len(shown), count
        )

    def left(self, queued: bool) -> None:
        """The collective returned (``queued``: its work may still be running)."""
        self.map[0] = QUEUED if queued else EMPTY

    def read(self) -> CollectiveCall | None:
        """What the page says the rank is in (None: no collective)."""
        return read_note(self.map)

    def close_fd(self) -> None:
        """Close the descriptor (the map stays readable)."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1

    def close(self) -> None:
        """Close the descriptor and the map."""
        self.close_fd()
        with contextlib.suppress(BufferError, ValueError):
            self.map.close()


def read_note(page: bytes | bytearray | memoryview | mmap.mmap) -> CollectiveCall | None:
    """The collective a page notes, as the rank described it (no caller's line: that is read
    from the rank itself while it lives)."""
    state, op, seq, start, world, size, noted, count = _HEAD.unpack_from(page, 0)
    if state == EMPTY or op >= len(OPS):
        return None
    ranks = _RANKS.unpack_from(page, _HEAD.size)[:noted]
    shapes, dtypes = [], []
    for at in range(count):
        ndim, dtype, *dims = _TENSOR.unpack_from(page, _TENSORS_AT + at * _TENSOR.size)
        shapes.append(tuple(dims[: min(ndim, MAX_DIMS)]))
        dtypes.append(DTYPES[dtype] if dtype < len(DTYPES) else "?")
    if world:
        group = "world"
    elif ranks:
        group = "ranks " + ",".join(map(str, ranks))
    else:
        group = f"a group of {size} ranks"
    return CollectiveCall(
        op=OPS[op],
        seq=seq,
        group=group,
        group_ranks=tuple(ranks),
        site=None,
        shapes=tuple(shapes),
        dtypes=tuple(dtypes),
        seconds=max(time.time() - start, 0.0),
        queued=state == QUEUED,
    )


def call_to_json(call: CollectiveCall | None) -> dict[str, Any] | None:
    """A noted call as JSON (a host's agent sends it with the rank's exit)."""
    if call is None:
        return None
    return {
        "op": call.op,
        "seq": call.seq,
        "group": call.group,
        "group_ranks": list(call.group_ranks),
        "shapes": [list(shape) for shape in call.shapes],
        "dtypes": list(call.dtypes),
        "seconds": call.seconds,
        "queued": call.queued,
    }


def call_from_json(data: dict[str, Any] | None) -> CollectiveCall | None:
    """Inverse of :func:`call_to_json`."""
    if not data:
        return None
    return CollectiveCall(
        op=str(data["op"]),
        seq=int(data["seq"]),
        group=str(data["group"]),
        group_ranks=tuple(int(r) for r in data["group_ranks"]),
        site=None,
        shapes=tuple(tuple(int(n) for n in shape) for shape in data["shapes"]),
        dtypes=tuple(str(d) for d in data["dtypes"]),
        seconds=float(data.get("seconds", 0.0)),
        queued=bool(data.get("queued", False)),
    )
