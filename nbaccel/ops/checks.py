"""Checks every process makes before a collective, so that a mismatch is an error, not a hang."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..validation import is_int
from .exchange import Context, Layout, exchange_layouts, flatten_tensors
from .nested import recursively_apply

__all__ = [
    "Check",
    "agree",
    "agree_packed",
    "check_process",
    "gather_hint",
    "per_process",
    "rebuild",
    "same_ndim",
    "same_shape_and_dtype",
    "shape_text",
    "tensor_leaves",
]

Check = Callable[[str, list[Layout], list[str]], None]


def per_process(values: list[Any]) -> str:
    """``"process 0: a, process 1: b"`` for one value per process."""
    return ", ".join(f"process {i}: {v}" for i, v in enumerate(values))


def shape_text(shape: tuple[int, ...]) -> str:
    """A shape as ``[2, 3]``."""
    return f"[{', '.join(str(s) for s in shape)}]"


def tensor_leaves(op: str, data: Any, ctx: Context | None) -> list[tuple[str, Any]]:
    """The tensors of nested ``data``; TypeError naming the leaves that are not tensors."""
    tensors, others = flatten_tensors(data)
    if others:
        where = f" on process {ctx.process_index}" if ctx is not None else ""
        listed = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        raise TypeError(
            f"{op} works on tensors in nested lists, tuples and dicts, but got non-tensor "
            f"values{where}: {listed}. Convert them with torch.tensor(...), or use gather_object "
            "/ broadcast_object_list for plain Python objects."
        )
    return tensors


def agree(op: str, data: Any, ctx: Context, check: Check) -> tuple[list[Any], list[Layout]]:
    """Exchange layouts, then raise the same kind of error on every process if they don't fit.

    Returns:
        This process's tensors (traversal order) and every process's layout.
    """
    tensors, layouts, _ = agree_packed(op, data, ctx, check)
    return tensors, layouts


Pack = Callable[[list[Any]], tuple[list[int], list[Any], int]]


def agree_packed(
    op: str, data: Any, ctx: Context, check: Check, pack: Pack | None = None
) -> tuple[list[Any], list[Layout], Any]:
    """:func:`agree`; with ``pack``, also the tensors that travel with the layouts.

    ``pack(tensors)`` returns the indices of the tensors it packed, their bytes (uint8 CPU
    tensors, in that order) and the bytes it would have packed had there been room (see
    :func:`~nbaccel.state.handshake.handshake_payload`). The third value is every process's
    packed bytes, or None when the processes did not pack the same tensors (then every
    tensor still has to travel).
    """
    local_error: TypeError | None = None
    try:
        tensors = tensor_leaves(op, data, ctx)
    except TypeError as error:
        local_error, tensors = error, []
    chosen: list[int] = []
    parts: list[Any] | None = None
    wanted = 0
    if pack is not None:
        chosen, parts, wanted = pack([t for _, t in tensors]) if not local_error else ([], [], 0)
    layouts, extras, rows = exchange_layouts(
        Layout.of(tensors, ok=local_error is None), ctx, op, chosen, parts, wanted
    )
    if local_error is not None:
        raise local_error
    bad = [i for i, layout in enumerate(layouts) if not layout.ok]
    if bad:
        raise TypeError(
            f"{op} could not run: process(es) {bad} passed values that are not tensors (their "
            "own error names them). Every process must pass nested lists, tuples and dicts of "
            "tensors."
        )
    counts = [len(layout.tensors) for layout in layouts]
    if len(set(counts)) > 1:
        raise ValueError(
            f"{op} needs the same structure on every process, but the number of tensors "
            f"differs ({per_process(counts)}). Pass the same nested lists, tuples and dicts "
            "of tensors on every process."
        )
    check(op, layouts, [path for path, _ in tensors])
    same = rows is not None and chosen and all(e == chosen for e in extras)
    return [tensor for _, tensor in tensors], layouts, rows if same else None


def same_shape_and_dtype(hint: Callable[[int, list[tuple[int, ...]]], str]) -> Check:
    """A check that every tensor has one shape and one dtype on all processes."""

    def check(op: str, layouts: list[Layout], paths: list[str]) -> None:
        for i, path in enumerate(paths):
            shapes = [layout.shape(i) for layout in layouts]
            if len(set(shapes)) > 1:
                raise ValueError(
                    f"{op} needs {path} to have the same shape on every process, but it differs "
                    f"({per_process([shape_text(s) for s in shapes])}). {hint(i, shapes)}"
                )
            dtypes = [layout.dtype(i) for layout in layouts]
            if len(set(dtypes)) > 1:
                raise ValueError(
                    f"{op} needs {path} to have the same dtype on every process, but it differs "
                    f"({per_process(dtypes)}). Cast it first, e.g. tensor.float()."
                )

    return check


def gather_hint(_: int, shapes: list[tuple[int, ...]]) -> str:
    """What to do when a tensor's shape differs between processes before a gather."""
    if len({len(s) for s in shapes}) > 1:
        return "Give the tensor the same number of dimensions on every process."
    dim = next(d for d in range(len(shapes[0])) if len({s[d] for s in shapes}) > 1)
    return (
        f"Pad it first with pad_across_processes(data, dim={dim}) (and drop the padding after "
        "gathering), or use gather_object for data whose size differs between processes."
    )


def same_ndim(op: str, layouts: list[Layout], paths: list[str]) -> None:
    """A check that every tensor has one number of dimensions on all processes."""
    for i, path in enumerate(paths):
        shapes = [layout.shape(i) for layout in layouts]
        if len({len(s) for s in shapes}) > 1:
            raise ValueError(
                f"{op} needs {path} to have the same number of dimensions on every process, "
                f"but its shapes are {per_process([shape_text(s) for s in shapes])}."
            )


def rebuild(data: Any, results: list[Any]) -> Any:
    """``data`` with its tensors replaced, in traversal order, by ``results``."""
    replacements = iter(results)
    return recursively_apply(lambda _: next(replacements), data)


def check_process(op: str, value: Any, ctx: Context) -> int:
    """``value`` as a process index for ``op``'s ``from_process``; TypeError / ValueError if bad."""
    if not is_int(value):
        raise TypeError(
            f"{op}(from_process=...) must be an int, got {type(value).__name__} ({value!r})."
        )
    if not 0 <= value < ctx.num_processes:
        raise ValueError(
            f"{op}(from_process={value}) is out of range: this job has {ctx.num_processes} "
            f"process(es), numbered 0..{ctx.num_processes - 1}."
        )
    return value
