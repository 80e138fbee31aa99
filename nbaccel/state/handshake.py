"""The handshake that starts every nbaccel collective: each process says which operation it is
in, so that a collective called on some processes only fails at once on all of them.

Code such as ``if accelerator.is_main_process: accelerator.gather(x)`` followed by
``accelerator.wait_for_everyone()`` would leave the main process in one collective and the
others in another, waiting for ever. Every nbaccel collective (``wait_for_everyone``, the
layout exchange before ``gather`` / ``reduce`` / ``pad_across_processes`` / ``broadcast``, the
start of ``save_state`` and of FSDP's full state dicts) begins with one ``all_gather`` of
rows of the same size on every process, holding the operation's name and a few integers;
when the names differ, every process raises :class:`CollectiveMismatchError`, naming what
each process was doing.

The row also has room for data: ``gather`` sends its CPU tensors there when they fit, so that
it is one collective. How much room every process's row has is predicted the same way on
every process, from the handshakes before (see :mod:`nbaccel.state.handshake_room`).
"""

from __future__ import annotations

import functools
from array import array

import torch
import torch.distributed as dist

from .handshake_room import MAX_PAYLOAD_BYTES, PAYLOAD_BYTES, kept_buffers, payload_capacity, record

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "PAYLOAD_BYTES",
    "CollectiveMismatchError",
    "all_gather_into",
    "enter",
    "handshake",
    "handshake_payload",
    "payload_capacity",
]

_NAME = 32  # characters of the operation's name that travel
_INLINE = 64  # integers that travel with the name; longer lists need a second all_gather
_WORDS = _NAME + 2 + _INLINE  # the name, the count of values, the bytes wanted, the values


class CollectiveMismatchError(RuntimeError):
    """Processes entered different collective operations (one was called on some only)."""


@functools.lru_cache(maxsize=64)
def _name_bytes(op: str) -> bytes:
    """The operation's name as the row's first ``_NAME`` words."""
    return op.encode()[: _NAME * 8].ljust(_NAME * 8, b"\0")


def _encode(
    row: torch.Tensor, end: int, op: str, values: list[int], parts: list[torch.Tensor], wanted: int
) -> int:
    """Write one row (a uint8 CPU tensor): the name, the count of values, the bytes wanted, up to
    ``_INLINE`` values, then ``parts`` (uint8 CPU tensors) one after the other, zeros after them.

    ``end`` is where the row's last payload ended (bytes up to it are cleared); returns where
    this one ends."""
    inline = values[:_INLINE]
    words = array("q", [len(values), wanted, *inline, *([0] * (_INLINE - len(inline)))])
    view = row.numpy()
    head = _name_bytes(op) + words.tobytes()
    view[: len(head)] = memoryview(head)
    offset = len(head)
    for part in parts:
        view[offset : offset + part.numel()] = part.numpy()
        offset += part.numel()
    if offset < end:
        view[offset:end] = 0
    return offset


def _name(row: bytes) -> str:
    return row[: _NAME * 8].rstrip(b"\0").decode(errors="replace")


def all_gather_into(out: torch.Tensor, tensor: torch.Tensor) -> None:
    """Every process's ``tensor`` written into ``out`` (``world`` times its size), in one
    collective and without copies (torch's ``all_gather_single``, or its older name)."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(out, tensor)


def _all_gather_rows(row: torch.Tensor, world: int) -> torch.Tensor:
    out = row.new_empty(world * row.numel())
    all_gather_into(out, row)
    return out.view(world, row.numel()).cpu()


def _mismatch(op: str, names: list[str]) -> CollectiveMismatchError:
    listed = ", ".join(f"process {i}: {name}" for i, name in enumerate(names))
    return CollectiveMismatchError(
        f"{op} could not run: the processes are in different collective operations ({listed}). "
        "A collective must be called by every process, in the same order; this one was "
        "probably called inside `if accelerator.is_main_process:` (or another branch that "
        "only some processes take). Call it on every process (each passes its own data), "
        "outside the branch, and keep only file writing and printing inside it."
    )


def handshake(op: str, values: list[int], device: torch.device, world: int) -> list[list[int]]:
    """Every process's ``values`` (in process order) after checking that all are in ``op``.

    Args:
        op: the public operation's name (shown in the error).
        values: integers to exchange with it (a layout, a length); may differ in length.
        device: where the collective's tensors live (CPU for gloo, the GPU for nccl).
        world: the number of processes.

    Raises:
        CollectiveMismatchError: on every process, when some are in another operation.
    """
    return handshake_payload(op, values, device, world)[0]


def handshake_payload(
    op: str,
    values: list[int],
    device: torch.device,
    world: int,
    parts: list[torch.Tensor] | None = None,
    wanted: int = 0,
) -> tuple[list[list[int]], torch.Tensor]:
    """:func:`handshake`, also carrying data from every process in the same single collective.

    Args:
        parts: uint8 CPU tensors sent one after the other, at most :func:`payload_capacity`
            bytes in all (read before the call).
        wanted: the bytes this process would send if there were room (a hint for the room of
            the handshakes to come).

    Returns:
        Every process's ``values``, and every process's data as a ``(world, room)`` uint8
        tensor on the CPU (the bytes after a process's parts are zeros). The data is a view
        of a buffer the next handshake overwrites: copy out what is kept.
    """
    room = payload_capacity()
    size = _WORDS * 8 + room
    if sum(part.numel() for part in parts or []) > room:
        raise ValueError(f"{op}: the payload does not fit in the handshake's {room} bytes.")
    if device.type == "cpu":
        kept = kept_buffers(size, world)
        row, out = kept[0], kept[1]
        kept[2] = _encode(row, kept[2], op, values, parts or [], wanted)
        all_gather_into(out, row)
        rows = out.view(world, size)
    else:
        row = torch.empty(size, dtype=torch.uint8)
        _encode(row, size, op, values, parts or [], wanted)
        rows = _all_gather_rows(row.to(device), world)
    heads = rows[:, : _WORDS * 8].numpy().tobytes()
    size = _WORDS * 8
    names = [heads[i * size : i * size + _NAME * 8] for i in range(world)]
    words = [array("q", heads[i * size + _NAME * 8 : (i + 1) * size]) for i in range(world)]
    record(names[0], max(int(w[1]) for w in words))  # alike on every process, before any raise
    if any(name != names[0] for name in names):
        raise _mismatch(op, [_name(name) for name in names])
    lengths = [int(w[0]) for w in words]
    data = rows[:, _WORDS * 8 :]
    if max(lengths) <= _INLINE:
        return [list(w[2 : 2 + n]) for w, n in zip(words, lengths, strict=True)], data
    full = torch.zeros(max(lengths), dtype=torch.int64)
    full[: len(values)] = torch.tensor(values, dtype=torch.int64)
    every = _all_gather_rows(full.to(device), world)
    return [every[i, :n].tolist() for i, n in enumerate(lengths)], data


def enter(op: str) -> None:
    """The handshake alone, for an operation about to run collectives of its own (a barrier,
    ``save_state``, FSDP's state dicts). Nothing happens on one process or on XLA."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return
    backend = dist.get_backend()
    if backend == "xla":
        return
    if backend == "gloo":
        device = torch.device("cpu")
    else:
        device = torch.device("cuda", torch.cuda.current_device())
    handshake(op, [], device, dist.get_world_size())
