"""The handshake that starts every nbaccel collective: each process says which operation it is
in, so that a collective called on some processes only fails at once on all of them.

Code such as ``if accelerator.is_main_process: accelerator.gather(x)`` followed by
``accelerator.wait_for_everyone()`` would leave the main process in one collective and the
others in another, waiting for ever. Every nbaccel collective (``wait_for_everyone``, the
layout exchange before ``gather`` / ``reduce`` / ``pad_across_processes`` / ``broadcast``, the
start of ``save_state`` and of FSDP's full state dicts) begins with one small fixed-size
``all_gather`` of the operation's name and a few integers; when the names differ, every
process raises :class:`CollectiveMismatchError`, naming what each process was doing.
"""

from __future__ import annotations

import functools
from array import array

import torch
import torch.distributed as dist

__all__ = [
    "PAYLOAD_BYTES",
    "CollectiveMismatchError",
    "all_gather_into",
    "enter",
    "handshake",
    "handshake_payload",
]

_NAME = 32  # characters of the operation's name that travel
_INLINE = 64  # integers that travel with the name; longer lists need a second all_gather
PAYLOAD_BYTES = 4096  # data bytes that travel with them (small tensors of a gather)
_WORDS = _NAME + 1 + _INLINE


class CollectiveMismatchError(RuntimeError):
    """Processes entered different collective operations (one was called on some only)."""


@functools.lru_cache(maxsize=64)
def _name_bytes(op: str) -> bytes:
    """The operation's name as the row's first ``_NAME`` words."""
    return op.encode()[: _NAME * 8].ljust(_NAME * 8, b"\0")


def _encode(op: str, values: list[int], payload: torch.Tensor | None) -> torch.Tensor:
    """One row: the name, the count of values, up to ``_INLINE`` values, the payload bytes."""
    inline = values[:_INLINE]
    words = array("q", [len(values), *inline, *([0] * (_INLINE - len(inline)))])
    row = bytearray(_name_bytes(op))
    row += words.tobytes()
    data = b"" if payload is None else payload.numpy().tobytes()
    row += data.ljust(PAYLOAD_BYTES, b"\0")
    return torch.frombuffer(row, dtype=torch.uint8)


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
    payload: torch.Tensor | None = None,
) -> tuple[list[list[int]], torch.Tensor]:
    """:func:`handshake`, also carrying up to :data:`PAYLOAD_BYTES` bytes (``payload``, a
    uint8 tensor on the CPU) from every process: returned as a ``(world, PAYLOAD_BYTES)``
    uint8 tensor on the CPU, in the same single collective."""
    rows = _all_gather_rows(_encode(op, values, payload).to(device), world)
    raw = rows.numpy().tobytes()
    size = rows.shape[1]
    heads = [raw[i * size : i * size + _WORDS * 8] for i in range(world)]
    if any(head[: _NAME * 8] != heads[0][: _NAME * 8] for head in heads):
        raise _mismatch(op, [_name(head) for head in heads])
    words = [array("q", head[_NAME * 8 :]) for head in heads]
    lengths = [int(w[0]) for w in words]
    data = rows[:, _WORDS * 8 :]
    if max(lengths) <= _INLINE:
        return [list(w[1 : 1 + n]) for w, n in zip(words, lengths, strict=True)], data
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
