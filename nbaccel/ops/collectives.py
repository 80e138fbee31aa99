"""Collectives over nested tensors: gather, pad_across_processes, reduce, broadcast and friends."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ..state.handshake import MAX_PAYLOAD_BYTES, all_gather_into, payload_capacity
from ..validation import is_int, is_number
from .checks import (
    agree,
    agree_packed,
    check_process,
    gather_hint,
    per_process,
    rebuild,
    same_ndim,
    same_shape_and_dtype,
    shape_text,
    tensor_leaves,
)
from .exchange import Context, context, exchange_ints
from .padding_warning import CannotPadNestedTensorWarning

__all__ = [
    "broadcast",
    "broadcast_object_list",
    "gather",
    "gather_object",
    "pad_across_processes",
    "reduce",
]

REDUCTIONS = ("sum", "mean", "none", "max", "min")
_TORCH_OPS = {"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


# -- gather ------------------------------------------------------------------------------------


def _gather_one(tensor: torch.Tensor, ctx: Context) -> torch.Tensor:
    tensor = (tensor.reshape(1) if tensor.ndim == 0 else tensor).contiguous()
    out = tensor.new_empty((ctx.num_processes * tensor.shape[0], *tensor.shape[1:]))
    all_gather_into(out, tensor)  # straight into the result: no copy after it
    return out


def _pack_small(tensors: list[torch.Tensor]) -> tuple[list[int], list[torch.Tensor], int]:
    """The CPU tensors that fit in the room the layout check has for data (in traversal order,
    while they fit), their bytes, and the bytes of every CPU tensor (what the room should
    grow to, unless that is more than it ever grows to)."""
    room = payload_capacity()
    chosen: list[int] = []
    parts: list[torch.Tensor] = []
    size = total = 0
    for index, tensor in enumerate(tensors):
        if tensor.device.type != "cpu":
            continue
        nbytes = tensor.numel() * tensor.element_size()
        total += nbytes
        if size + nbytes <= room:
            chosen.append(index)
            parts.append(tensor.detach().contiguous().reshape(-1).view(torch.uint8))
            size += nbytes
    return chosen, parts, total if total <= MAX_PAYLOAD_BYTES else 0


def _unpack_small(
    tensors: list[torch.Tensor], chosen: list[int], rows: torch.Tensor, results: list[Any]
) -> None:
    """Copy each packed tensor's rows (one per process) out of the gathered payloads (a
    buffer that the next handshake reuses)."""
    offset = 0
    world = rows.shape[0]
    for index in chosen:
        tensor = tensors[index]
        nbytes = tensor.numel() * tensor.element_size()
        part = torch.empty(world * nbytes, dtype=torch.uint8)
        part.view(world, nbytes).copy_(rows[:, offset : offset + nbytes])
        shape = tensor.shape if tensor.ndim else (1,)
        results[index] = part.view(tensor.dtype).reshape(world * shape[0], *shape[1:])
        offset += nbytes


def _gather_fused(tensors: list[torch.Tensor], ctx: Context) -> list[torch.Tensor]:
    """Gather several tensors with one collective: their bytes travel as one buffer.

    Every process holds the same shapes and dtypes (checked before), so each tensor sits at
    the same offset of every process's buffer and is cut back out of the gathered rows.
    """
    flat = [(t.reshape(1) if t.ndim == 0 else t).detach().contiguous() for t in tensors]
    buffer = torch.cat([t.reshape(-1).view(torch.uint8) for t in flat])
    rows = _gather_one(buffer, ctx).view(ctx.num_processes, -1)
    results: list[torch.Tensor] = []
    offset = 0
    for tensor in flat:
        size = tensor.numel() * tensor.element_size()
        part = rows[:, offset : offset + size].contiguous().view(tensor.dtype)
        results.append(part.reshape(ctx.num_processes * tensor.shape[0], *tensor.shape[1:]))
        offset += size
    return results


def gather(tensor: Any) -> Any:
    """Gather the tensors of nested ``tensor`` from every process, concatenated along dim 0.

    0-d tensors become 1-d first, so a scalar per process gives a vector with one value per
    process, in process order. On one process ``tensor`` is returned unchanged.

    Args:
        tensor: a tensor, or nested lists / tuples / dicts of tensors; the same shapes and dtypes
            on every process (pad with :func:`pad_across_processes` where sizes differ).

    Returns:
        The same structure; each tensor holds process 0's rows, then process 1's, and so on.

    Raises:
        TypeError: a leaf is not a tensor (use :func:`gather_object` for Python objects).
        ValueError: the structure, a shape or a dtype differs between processes; raised on every
            process, naming each process's shape, before any data moves.
    """
    ctx = context()
    if not ctx.distributed:
        tensor_leaves("gather", tensor, None)
        return tensor
    check = same_shape_and_dtype(gather_hint)
    if ctx.is_xla:
        # torch_xla is installed on TPU hosts only
        import torch_xla.core.xla_model as xm

        tensors, _ = agree("gather", tensor, ctx, check)
        gathered = [
            xm.all_gather((t.reshape(1) if t.ndim == 0 else t).contiguous()) for t in tensors
        ]
        xm.mark_step()
        return rebuild(tensor, gathered)
    packed: list[list[int]] = []

    def pack(leaves: list[torch.Tensor]) -> tuple[list[int], list[torch.Tensor], int]:
        chosen, parts, wanted = _pack_small(leaves)
        packed.append(chosen)
        return chosen, parts, wanted

    gloo = ctx.backend in (None, "gloo")
    tensors, _, rows = agree_packed("gather", tensor, ctx, check, pack if gloo else None)
    results: list[Any] = [None] * len(tensors)
    if rows is not None:  # the CPU tensors that fit came with the layout check
        _unpack_small(tensors, packed[0], rows, results)
    rest = [i for i, r in enumerate(results) if r is None]
    if len(rest) > 1 and len({tensors[i].device for i in rest}) == 1:
        for index, result in zip(rest, _gather_fused([tensors[i] for i in rest], ctx), strict=True):
            results[index] = result
    else:
        for index in rest:
            results[index] = _gather_one(tensors[index], ctx)
    return rebuild(tensor, results)


def gather_object(object: Any) -> list[Any]:
    """Gather a picklable object from every process.

    Returns:
        When every process passes a list or tuple: their elements, concatenated in process
        order. Otherwise the list of every process's object. On one process a list or tuple is
        returned unchanged and any other object as ``[object]``.
    """
    ctx = context()
    if not ctx.distributed:
        return object if isinstance(object, (list, tuple)) else [object]  # type: ignore[return-value]
    if ctx.is_xla:
        # torch_xla is installed on TPU hosts only
        import torch_xla.core.xla_model as xm

        gathered = list(xm.mesh_reduce("nbaccel.ops.gather_object", object, list))
    else:
        exchange_ints([], ctx, "gather_object")  # fails at once if some are elsewhere
        gathered = [None] * ctx.num_processes
        dist.all_gather_object(gathered, object)
    if all(isinstance(item, (list, tuple)) for item in gathered):
        return [element for item in gathered for element in item]
    return gathered


# -- pad ---------------------------------------------------------------------------------------


def _pad_one(
    tensor: torch.Tensor, dim: int, size: int, pad_index: Any, pad_first: bool
) -> torch.Tensor:
    old = tensor.shape[dim]
    if size == old:
        return tensor
    new_shape = list(tensor.shape)
    new_shape[dim] = size
    padded = tensor.new_full(new_shape, pad_index)
    keep = slice(size - old, size) if pad_first else slice(0, old)
    padded[(slice(None),) * dim + (keep,)] = tensor
    return padded


def pad_across_processes(
    tensor: Any, dim: int = 0, pad_index: Any = 0, pad_first: bool = False
) -> Any:
    """Pad the tensors of nested ``tensor`` along ``dim`` to their largest size on any process.

    After this, :func:`gather` works on tensors whose size along ``dim`` differed. Tensors with
    fewer than ``dim + 1`` dimensions are left as they are; negative ``dim`` counts from the
    end. On one process ``tensor`` is returned unchanged.

    Args:
        tensor: a tensor, or nested lists / tuples / dicts of tensors.
        dim: the dimension to pad.
        pad_index: the value written into the padding.
        pad_first: pad at the start instead of the end.

    Raises:
        TypeError: a bad argument, or a leaf that is not a tensor.
        ValueError: the structure or a tensor's number of dimensions differs between processes.
    """
    if not is_int(dim):
        raise TypeError(f"pad_across_processes(dim=...) must be an int, got {dim!r}.")
    if not is_number(pad_index):
        raise TypeError(f"pad_across_processes(pad_index=...) must be a number, got {pad_index!r}.")
    if isinstance(tensor, torch.Tensor) and tensor.is_nested:
        warnings.warn(
            "pad_across_processes cannot pad a nested tensor; it is returned unchanged.",
            CannotPadNestedTensorWarning,
            stacklevel=2,
        )
        return tensor
    ctx = context()
    if not ctx.distributed:
        tensor_leaves("pad_across_processes", tensor, None)
        return tensor
    tensors, layouts = agree("pad_across_processes", tensor, ctx, same_ndim)
    results = []
    for i, leaf in enumerate(tensors):
        axis = dim + leaf.ndim if dim < 0 else dim
        if not 0 <= axis < leaf.ndim:
            results.append(leaf)
            continue
        size = max(layout.shape(i)[axis] for layout in layouts)
        results.append(_pad_one(leaf, axis, size, pad_index, bool(pad_first)))
    return rebuild(tensor, results)


# -- reduce ------------------------------------------------------------------------------------


def _finish_reduce(tensor: torch.Tensor, reduction: str, divisor: int, scale: float) -> Any:
    if reduction == "mean":
        tensor = torch.div(tensor, divisor)
    return tensor * scale if scale != 1.0 else tensor


def reduce(tensor: Any, reduction: str = "mean", scale: float = 1.0) -> Any:
    """Reduce the tensors of nested ``tensor`` over every process.

    Args:
        tensor: a tensor, or nested lists / tuples / dicts of tensors; the same shapes and dtypes
            on every process.
        reduction: ``"sum"``, ``"mean"``, ``"max"``, ``"min"`` or ``"none"`` (as in Accelerate,
            ``"none"`` also sums; ``"min"`` is the element-wise minimum, where Accelerate
            quietly sums).
        scale: multiplies the result (on every platform; Accelerate applies it on XLA only).

    Returns:
        The same structure with new tensors (the inputs are not modified). On one process each
        tensor is a copy of its input (times ``scale``). ``"mean"`` of integer tensors is a
        floating-point tensor.

    Raises:
        ValueError: an unknown ``reduction``, or shapes / dtypes that differ between processes.
        TypeError: a leaf that is not a tensor, or a ``scale`` that is not a number.
    """
    if reduction not in REDUCTIONS:
        allowed = ", ".join(repr(r) for r in REDUCTIONS)
        raise ValueError(f"reduce(reduction={reduction!r}) is not valid; allowed: {allowed}.")
    if not is_number(scale):
        raise TypeError(f"reduce(scale=...) must be a number, got {scale!r}.")
    ctx = context()
    if not ctx.distributed:
        tensors = [t for _, t in tensor_leaves("reduce", tensor, None)]
        return rebuild(tensor, [_finish_reduce(t.clone(), reduction, 1, scale) for t in tensors])
    check = same_shape_and_dtype(lambda *_: "Pad it first with pad_across_processes.")
    tensors, _ = agree("reduce", tensor, ctx, check)
    clones = [t.clone() for t in tensors]
    if ctx.is_xla:
        # torch_xla is installed on TPU hosts only
        import torch_xla.core.xla_model as xm

        xm.mark_step()
        xla_op = {"max": "REDUCE_MAX", "min": "REDUCE_MIN"}.get(reduction, "REDUCE_SUM")
        xm.all_reduce(getattr(xm, xla_op), clones, scale)
        xm.mark_step()
        scale = 1.0  # applied by all_reduce
    else:
        for clone in clones:
            dist.all_reduce(clone, op=_TORCH_OPS.get(reduction, dist.ReduceOp.SUM))
    results = [_finish_reduce(c, reduction, ctx.num_processes, scale) for c in clones]
    return rebuild(tensor, results)


# -- broadcast ---------------------------------------------------------------------------------


def _broadcast_hint(from_process: int) -> Callable[[int, list[tuple[int, ...]]], str]:
    def hint(_: int, shapes: list[tuple[int, ...]]) -> str:
        return (
            f"broadcast copies process {from_process}'s tensors into the other processes' "
            f"tensors, so each must already have shape {shape_text(shapes[from_process])} "
            "(e.g. torch.empty(shape) on the receivers). Use broadcast_object_list to send data "
            "whose shape the receivers do not know."
        )

    return hint


def broadcast(tensor: Any, from_process: int = 0) -> Any:
    """Copy the tensors of nested ``tensor`` from process ``from_process`` to every process.

    With torch.distributed the tensors are overwritten in place and ``tensor`` is returned; on
    XLA new tensors are returned. Use the return value either way. On one process ``tensor`` is
    returned unchanged.

    Raises:
        ValueError: ``from_process`` out of range, or the structure, a shape or a dtype differs
            between processes (raised on every process before any data moves).
        TypeError: a bad ``from_process``, or a leaf that is not a tensor.
    """
    ctx = context()
    source = check_process("broadcast", from_process, ctx)
    if not ctx.distributed:
        tensor_leaves("broadcast", tensor, None)
        return tensor
    tensors, _ = agree("broadcast", tensor, ctx, same_shape_and_dtype(_broadcast_hint(source)))
    if ctx.is_xla:
        # torch_xla is installed on TPU hosts only
        import torch_xla.core.xla_model as xm

        results = [
            xm.mesh_reduce(f"nbaccel.ops.broadcast.{i}", t, lambda x: x[source])
            for i, t in enumerate(tensors)
        ]
        return rebuild(tensor, results)
    for leaf in tensors:
        buffer = leaf if leaf.is_contiguous() else leaf.contiguous()
        dist.broadcast(buffer, src=source)
        if buffer is not leaf:
            leaf.copy_(buffer)
    return tensor


def broadcast_object_list(object_list: list[Any], from_process: int = 0) -> list[Any]:
    """Replace, in place, the items of ``object_list`` with those of process ``from_process``.

    Every process passes a list of the same length (placeholders such as None on the
    receivers); the objects must be picklable.

    Returns:
        ``object_list`` itself.

    Raises:
        TypeError: ``object_list`` is not a list, or a bad ``from_process``.
        ValueError: ``from_process`` out of range, or lists of different lengths.
    """
    if not isinstance(object_list, list):
        raise TypeError(
            "broadcast_object_list fills its list in place, so it needs a list, got "
            f"{type(object_list).__name__}. Wrap the value: broadcast_object_list([value])[0]."
        )
    ctx = context()
    source = check_process("broadcast_object_list", from_process, ctx)
    if not ctx.distributed:
        return object_list
    lengths = [v[0] for v in exchange_ints([len(object_list)], ctx, "broadcast_object_list")]
    if len(set(lengths)) > 1:
        raise ValueError(
            "broadcast_object_list needs a list of the same length on every process, but the "
            f"lengths differ ({per_process(lengths)}). Pass e.g. [None] * {lengths[source]} "
            "on the receiving processes."
        )
    if ctx.is_xla:
        # torch_xla is installed on TPU hosts only
        import torch_xla.core.xla_model as xm

        for i, obj in enumerate(object_list):
            tag = f"nbaccel.ops.broadcast_object_list.{i}"
            object_list[i] = xm.mesh_reduce(tag, obj, lambda x: x[source])
    else:
        dist.broadcast_object_list(object_list, src=source)
    return object_list
