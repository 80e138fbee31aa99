"""How much data the next handshake's row carries, and the CPU buffers its rows live in.

A ``gather`` sends its CPU tensors in the handshake's row when they fit, so that it is one
collective instead of two. Every process's row must have the same size, whatever operation it
is in (gloo aborts a process whose peer sends a different size, where nbaccel wants a
:class:`~nbaccel.state.handshake.CollectiveMismatchError`), so the room in the row cannot
depend on the operation that is about to run: no process knows its peers' operation before
the handshake. It is predicted from the handshakes already made, which every process saw
alike: when the last operations repeat with a period of one to four (an evaluation loop's
``pad_across_processes``, ``gather``, ``pad_across_processes``, ``gather``, ...), the next
one is taken to be the one a period back, and the row gets room for the most bytes the
processes wanted to send in that operation's last two calls. Otherwise, and for each new
default process group, the room is :data:`PAYLOAD_BYTES`. A wrong guess costs only time: too
little room and the gather sends its data in a second collective; too much and a row carries
unused bytes once.
"""

from __future__ import annotations

import weakref
from collections import deque
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["MAX_PAYLOAD_BYTES", "PAYLOAD_BYTES", "kept_buffers", "payload_capacity", "record"]

PAYLOAD_BYTES = 4096  # the room when nothing better is known (a gather's small CPU tensors)
MAX_PAYLOAD_BYTES = 512 * 1024  # the most room a row gets (larger data has its own collective)
_STEP = 4096
_PERIODS = (1, 2, 3, 4)


class _History:
    """The last handshakes of the current default process group: (operation, bytes wanted)."""

    group: Any = None  # a weak reference to the group
    entries: deque[tuple[bytes, int]] = deque(maxlen=2 * max(_PERIODS))
    room = PAYLOAD_BYTES  # the prediction for the next handshake


def _current() -> type[_History]:
    group = dist.group.WORLD if dist.is_available() and dist.is_initialized() else None
    known = _History.group() if _History.group is not None else None
    if group is None or known is not group:  # a new process group starts afresh
        _History.group = weakref.ref(group) if group is not None else None
        _History.entries.clear()
        _History.room = PAYLOAD_BYTES
    return _History


def payload_capacity() -> int:
    """The data bytes the next handshake's row has room for (the same on every process)."""
    return _current().room


def _room_for(wanted: int) -> int:
    """Room for ``wanted`` bytes and a little more (unused room costs time in every row), in
    whole steps, within the bounds."""
    spare = -(-(wanted + wanted // 16) // _STEP) * _STEP
    return max(PAYLOAD_BYTES, min(MAX_PAYLOAD_BYTES, spare))


def record(op: bytes, wanted: int) -> None:
    """Note a handshake every process took part in (``op``: process 0's operation; ``wanted``:
    the most bytes any process wanted to send) and predict the next one's room. Call it with
    what the collective returned, so that every process predicts the same."""
    history = _current()
    entries = history.entries
    entries.append((op, wanted))
    history.room = PAYLOAD_BYTES
    for period in _PERIODS:
        if len(entries) >= 2 * period and all(
            entries[-i][0] == entries[-i - period][0] for i in range(1, period + 1)
        ):
            history.room = _room_for(max(entries[-period][1], entries[-2 * period][1]))
            return


class _Kept:
    """CPU send rows and receive buffers by (row size, processes), kept from one handshake to
    the next: fresh buffers of a few hundred kB cost more than the collective that fills them."""

    buffers: dict[tuple[int, int], list[Any]] = {}


def kept_buffers(size: int, world: int) -> list[Any]:
    """``[send row, receive buffer, end]`` for rows of ``size`` bytes; ``end`` is where the
    row's last payload ended (the caller updates it). The receive buffer is overwritten by the
    next handshake with rows of this size."""
    key = (size, world)
    kept = _Kept.buffers.get(key)
    if kept is None:
        if len(_Kept.buffers) >= 4:
            _Kept.buffers.pop(next(iter(_Kept.buffers)))
        row = torch.empty(size, dtype=torch.uint8)
        kept = _Kept.buffers[key] = [row, torch.empty(world * size, dtype=torch.uint8), size]
    return kept
