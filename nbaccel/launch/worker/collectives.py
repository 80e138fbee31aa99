"""Which ``torch.distributed`` collective each thread of a worker is in, kept at almost no cost.

:func:`track_collectives` wraps the collectives of ``torch.distributed`` once, when a worker
starts. A call then notes, in this process's memory only, what it is (the function, the
tensors it was given, its group and its number on that group, its caller and when it
started) and forgets it when it returns: no message, no extra collective, no formatting. The
note is read only when the notebook asks where the rank is (:func:`collective_in`, on the
reader thread), and is attached to an exception the collective raises. A call that returns
its ``Work`` (``async_op=True``) stays noted, as queued, until that work has completed: a
rank that went on while its peers never joined is still named in the collective.

When the launcher gave the worker a note page (``launch/notes.py``), the call also writes what
it is there before torch's C++ code runs, so that a rank killed inside it (gloo aborts on
mismatched shapes) is still named with its collective: one ``pack_into``, no formatting.

A collective called inside another (``all_gather_object`` calls ``all_gather``) counts once,
as the outer one, on every rank alike. Code that bound a collective before the worker
started (``from torch.distributed import all_reduce`` in the notebook, then fork) calls
torch's own function, which is not seen; DDP's gradient all-reduces run in C++ and are not
seen either. PyTorch's own records, turned on by variables, see everything and cost more:
``docs/troubleshooting.md``, "My cell hangs".
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
import time
from collections.abc import Callable
from threading import get_ident
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from ..location import CollectiveCall
from ..notes import DTYPES, OPS, NotePage
from .frames import person_frame, source_line

__all__ = [
    "COLLECTIVES",
    "collective_failed",
    "collective_in",
    "forget_failures",
    "keep_notes_in",
    "track_collectives",
    "untrack_collectives",
]

# name -> (position of its ``group`` argument, position and name of the tensor(s) it sends)
COLLECTIVES: dict[str, tuple[int, int | None, str]] = {
    "all_reduce": (2, 0, "tensor"),
    "all_reduce_coalesced": (2, 0, "tensors"),
    "all_gather": (2, 1, "tensor"),
    "all_gather_into_tensor": (2, 1, "input_tensor"),
    "all_gather_single": (2, 1, "input_tensor"),
    "all_gather_coalesced": (2, 1, "input_tensor_list"),
    "all_gather_object": (2, None, ""),
    "broadcast": (2, 0, "tensor"),
    "broadcast_object_list": (2, None, ""),
    "reduce": (3, 0, "tensor"),
    "reduce_scatter": (3, 1, "input_list"),
    "reduce_scatter_tensor": (3, 1, "input"),
    "reduce_scatter_single": (3, 1, "input"),
    "gather": (3, 0, "tensor"),
    "gather_object": (3, None, ""),
    "scatter": (3, 0, "tensor"),
    "scatter_object_list": (3, None, ""),
    "all_to_all": (2, 1, "input_tensor_list"),
    "all_to_all_single": (4, 1, "input"),
    "barrier": (0, None, ""),
    "monitored_barrier": (0, None, ""),
}


class _Call:
    """One collective in progress (read by the reader thread; never formatted here)."""

    __slots__ = ("args", "caller", "group", "kwargs", "op", "seq", "start")

    def __init__(
        self, op: str, seq: int, group: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        self.op, self.seq, self.group, self.args, self.kwargs = op, seq, group, args, kwargs
        self.start = time.monotonic()
        self.caller: FrameType | None = None


_ACTIVE: dict[int, _Call] = {}  # thread id -> the collective that thread is in
_QUEUED: dict[int, tuple[CollectiveCall, float, Any]] = {}  # thread id -> its last async
# call (described when it returned: the caller's line moves on), its start, and its Work
_COUNTS: dict[int, int] = {}  # id of a process group -> collectives called on it so far
_FAILED: dict[int, CollectiveCall] = {}  # thread id -> the last collective that raised there
_NOTE: list[NotePage] = []  # the page the launcher reads (none: not kept)
_GROUP_RANKS: dict[int, tuple[int, ...]] = {}  # id of a process group -> its global ranks
_OP_INDEX = {op: at for at, op in enumerate(OPS)}
_DTYPE_INDEX = {name: at for at, name in enumerate(DTYPES)}
_WORLD: Any = getattr(c10d, "_world", None)
_NOT_A_MEMBER: Any = getattr(c10d.GroupMember, "NON_GROUP_MEMBER", object())


def _tracked(op: str, original: Callable[..., Any]) -> Callable[..., Any]:
    group_at = COLLECTIVES[op][0]

    def call(*args: Any, **kwargs: Any) -> Any:
        ident = get_ident()
        if ident in _ACTIVE:  # inside another collective: that one is what the rank is in
            return original(*args, **kwargs)
        group = args[group_at] if len(args) > group_at else kwargs.get("group")
        if group is None and _WORLD is not None:
            group = _WORLD.default_pg
        if group is _NOT_A_MEMBER:  # torch returns at once on a rank outside the group
            return original(*args, **kwargs)
        key = id(group)
        seq = _COUNTS[key] = _COUNTS.get(key, 0) + 1
        record = _ACTIVE[ident] = _Call(op, seq, group, args, kwargs)
        record.caller = sys._getframe(1)
        note = _NOTE[0] if _NOTE else None
        if note is not None:
            try:
                _write_note(note, record)
            except Exception:  # the note is a help, never a reason for the call to fail
                note = None
        queued = False
        try:
            result = original(*args, **kwargs)
            if callable(getattr(result, "is_completed", None)):  # async_op=True: its Work
                queued = True
                _QUEUED[ident] = (_describe(record, record.start), record.start, result)
            return result
        except Exception as exc:
            _note_failure(exc, record)
            raise
        finally:
            record.caller = None
            del _ACTIVE[ident]
            if note is not None:
                note.left(queued)

    functools.update_wrapper(call, original)
    call.__dict__["_nbaccel_tracks"] = original
    return call


def _forgetting_counts(original: Callable[..., Any]) -> Callable[..., Any]:
    """``destroy_process_group``: a new group counts its collectives from 1 again."""

    def destroy(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        finally:
            _COUNTS.clear()
            _QUEUED.clear()
            _GROUP_RANKS.clear()

    functools.update_wrapper(destroy, original)
    destroy.__dict__["_nbaccel_tracks"] = original
    return destroy


def _wrapped(function: Any) -> bool:
    return "_nbaccel_tracks" in getattr(function, "__dict__", {})


def track_collectives() -> None:
    """Wrap ``torch.distributed``'s collectives in this process (once; a worker's start).

    ``torch.distributed.X`` and ``torch.distributed.distributed_c10d.X`` become the one
    wrapper: the person's code calls the first, torch's own helpers the second."""
    if not dist.is_available():
        return
    names = [*COLLECTIVES, "destroy_process_group"]
    for op in names:
        original = getattr(c10d, op, None) or getattr(dist, op, None)
        if original is None or _wrapped(original):
            continue
        wrapper = _forgetting_counts(original) if op not in COLLECTIVES else _tracked(op, original)
        for module in (dist, c10d):
            if getattr(module, op, None) is original:
                setattr(module, op, wrapper)


def untrack_collectives() -> None:
    """Put torch's own functions back (``benchmarks/where_overhead.py``'s baseline)."""
    for op in [*COLLECTIVES, "destroy_process_group"]:
        for module in (dist, c10d):
            wrapper = getattr(module, op, None)
            if wrapper is not None and _wrapped(wrapper):
                setattr(module, op, wrapper.__dict__["_nbaccel_tracks"])


def keep_notes_in(fd: int) -> None:
    """Write each collective this worker enters into the note page on ``fd`` (its launcher's
    copy of the page names the collective if the worker dies in it)."""
    if fd >= 0 and not _NOTE:
        _NOTE.append(NotePage.open(fd))


def _write_note(note: NotePage, record: _Call) -> None:
    """What ``record`` is, in the note page (its group's ranks are looked up once)."""
    group = record.group
    ranks = _GROUP_RANKS.get(id(group))
    if ranks is None:
        try:
            ranks = tuple(int(r) for r in c10d.get_process_group_ranks(group))
        except Exception:
            ranks = ()
        _GROUP_RANKS[id(group)] = ranks
    _, at, name = COLLECTIVES[record.op]
    tensors: list[tuple[tuple[int, ...], int]] = []
    if at is not None:
        sent = record.args[at] if len(record.args) > at else record.kwargs.get(name)
        for item in sent if isinstance(sent, (list, tuple)) else (sent,):
            if isinstance(item, torch.Tensor):
                dtype = _DTYPE_INDEX.get(str(item.dtype)[6:], 255)  # "torch.float32"
                tensors.append((tuple(item.shape), dtype))
    world = _WORLD is not None and group is _WORLD.default_pg
    note.entered(_OP_INDEX.get(record.op, 255), record.seq, world, ranks, tensors)


def collective_in(thread_id: int) -> CollectiveCall | None:
    """The collective thread ``thread_id`` is in now, described: the call it is in, else its
    last queued call (``async_op=True``) whose work has not completed; None for neither."""
    record = _ACTIVE.get(thread_id)
    if record is not None:
        return _describe(record, time.monotonic())
    queued = _QUEUED.get(thread_id)
    if queued is None:
        return None
    call, start, work = queued
    try:
        done = bool(work.is_completed())
    except Exception:  # the work failed: its wait() raises where the person calls it
        done = True
    if done:
        _QUEUED.pop(thread_id, None)
        return None
    return dataclasses.replace(call, seconds=time.monotonic() - start, queued=True)


def collective_failed(thread_id: int) -> CollectiveCall | None:
    """The last collective that raised on thread ``thread_id`` during the current task."""
    return _FAILED.get(thread_id)


def forget_failures() -> None:
    """A task ends: the collectives that failed in it are no longer news."""
    _FAILED.clear()


def _describe(record: _Call, now: float) -> CollectiveCall:
    person, called = person_frame(record.caller)
    via = ""
    if called is not None and called.f_code.co_name not in (record.op, "call", "wrapper"):
        via = called.f_code.co_name
    group, ranks, name = _group_of(record.group)
    shapes, dtypes = _tensors(record)
    return CollectiveCall(
        op=record.op,
        seq=record.seq,
        group=group,
        group_ranks=ranks,
        site=source_line(person) if person is not None else None,
        via=via,
        shapes=shapes,
        dtypes=dtypes,
        seconds=max(now - record.start, 0.0),
        group_id=name,
    )


def _group_of(group: Any) -> tuple[str, tuple[int, ...], str]:
    """``("world" or "ranks 0,2", its global ranks, the group's name as torch knows it)``."""
    name = ""
    with contextlib.suppress(Exception):
        name = str(group.group_name)
    try:
        ranks = tuple(int(r) for r in c10d.get_process_group_ranks(group))
    except Exception:
        ranks = ()
    world = _WORLD.default_pg if _WORLD is not None else None
    shown = "world" if group is world else "ranks " + ",".join(map(str, ranks))
    return shown, ranks, name or shown


def _tensors(record: _Call) -> tuple[tuple[tuple[int, ...], ...], tuple[str, ...]]:
    _, at, name = COLLECTIVES[record.op]
    if at is None:
        return (), ()
    sent = record.args[at] if len(record.args) > at else record.kwargs.get(name)
    items = sent if isinstance(sent, (list, tuple)) else [sent]
    tensors = [t for t in items if isinstance(t, torch.Tensor)]
    shapes = tuple(tuple(int(n) for n in t.shape) for t in tensors)
    return shapes, tuple(str(t.dtype).removeprefix("torch.") for t in tensors)


def _note_failure(exc: Exception, record: _Call) -> None:
    """Name the collective on an exception it raised (the rank's traceback shows it; the
    notebook reads ``_nbaccel_collective``)."""
    with contextlib.suppress(Exception):
        call = _describe(record, time.monotonic())
        _FAILED[get_ident()] = call
        if getattr(exc, "_nbaccel_collective", None) is None:
            exc._nbaccel_collective = call  # type: ignore[attr-defined]
            tensors = f" with {call.tensors}" if call.tensors else ""
            note = getattr(exc, "add_note", None)  # Python 3.11 and later
            if note is not None:
                note(f"(in {call.op} #{call.seq} on {call.group}{tensors})")
