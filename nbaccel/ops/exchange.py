"""Where the collectives run, and the layout check that every rank passes before one starts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ..enums import DistributedType
from ..state import PartialState
from ..state.handshake import handshake, handshake_payload
from ..state.registry import STATE, current_process

__all__ = [
    "Context",
    "Layout",
    "context",
    "exchange_ints",
    "exchange_layouts",
    "flatten_tensors",
]

# dtypes are sent as their index in this table; -1 stands for any other dtype.
_DTYPE_NAMES = (
    "float32", "float64", "float16", "bfloat16", "uint8", "int8", "int16", "int32", "int64",
    "bool", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2", "uint16", "uint32",
    "uint64",
)  # fmt: skip
_DTYPES = tuple(getattr(torch, name) for name in _DTYPE_NAMES if hasattr(torch, name))


@dataclass(frozen=True)
class Context:
    """What a collective needs to know about this process's place in the job."""

    kind: DistributedType
    num_processes: int
    process_index: int
    device: torch.device
    backend: str | None

    @property
    def distributed(self) -> bool:
        """True when the data has to travel between processes."""
        return self.num_processes > 1

    @property
    def is_xla(self) -> bool:
        """True on TPU (torch_xla) processes."""
        return self.kind == DistributedType.XLA


def context() -> Context:
    """The current process's context, read from the process-wide state."""
    record = STATE.process
    if record is None:  # the first call in this process sets the state up
        PartialState()
        record = current_process()
    ctx = Context(  # read straight from the record: this runs before every collective
        kind=record.distributed_type,
        num_processes=record.num_processes,
        process_index=record.process_index,
        device=record.device,
        backend=record.backend,
    )
    if ctx.distributed and not ctx.is_xla and not dist.is_initialized():
        raise RuntimeError(
            f"This process is one of {ctx.num_processes}, but no torch.distributed process "
            "group is initialised, so data cannot be exchanged. Start the job with "
            "notebook_launcher, `nbaccel launch` or torchrun, and create Accelerator() or "
            "PartialState() in every process before calling collective operations."
        )
    return ctx


def _path_of(parent: str, key: Any) -> str:
    return f"{parent}[{key!r}]"


def flatten_tensors(data: Any, path: str = "data") -> tuple[list[tuple[str, Any]], list[str]]:
    """``(path, leaf)`` for every leaf of nested ``data`` in ``recursively_apply`` order.

    Returns:
        The tensors with their paths, and the paths of leaves that are not tensors.
    """
    tensors: list[tuple[str, Any]] = []
    others: list[str] = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, (list, tuple)):
            for index, item in enumerate(node):
                walk(item, _path_of(where, index))
        elif isinstance(node, Mapping):
            for key, item in node.items():
                walk(item, _path_of(where, key))
        elif isinstance(node, torch.Tensor):
            tensors.append((where, node))
        else:
            others.append(f"{where} ({type(node).__name__})")

    walk(data, path)
    return tensors, others


def _dtype_code(dtype: torch.dtype) -> int:
    return _DTYPES.index(dtype) if dtype in _DTYPES else -1


def _dtype_name(code: int) -> str:
    return str(_DTYPES[code]).replace("torch.", "") if 0 <= code < len(_DTYPES) else "other"


@dataclass(frozen=True)
class Layout:
    """One process's side of a collective: whether its data was usable, and each tensor's
    dtype code and shape, in traversal order."""

    ok: bool
    tensors: tuple[tuple[int, tuple[int, ...]], ...]

    @classmethod
    def of(cls, tensors: list[tuple[str, Any]], ok: bool = True) -> Layout:
        """The layout of ``tensors`` (as :func:`flatten_tensors` returns them)."""
        return cls(ok, tuple((_dtype_code(t.dtype), tuple(t.shape)) for _, t in tensors))

    def encode(self) -> list[int]:
        """``[ok, count, (dtype, ndim, *shape) * count]``."""
        out = [int(self.ok), len(self.tensors)]
        for code, shape in self.tensors:
            out += [code, len(shape), *shape]
        return out

    @classmethod
    def decode(cls, values: list[int]) -> Layout:
        """The inverse of :meth:`encode`."""
        ok, count, pos = bool(values[0]), values[1], 2
        tensors = []
        for _ in range(count):
            code, ndim = values[pos], values[pos + 1]
            tensors.append((code, tuple(values[pos + 2 : pos + 2 + ndim])))
            pos += 2 + ndim
        return cls(ok, tuple(tensors))

    def shape(self, index: int) -> tuple[int, ...]:
        """Shape of tensor ``index``."""
        return self.tensors[index][1]

    def dtype(self, index: int) -> str:
        """dtype name of tensor ``index``."""
        return _dtype_name(self.tensors[index][0])


def _meta_device(ctx: Context) -> torch.device:
    return torch.device("cpu") if ctx.backend in (None, "gloo") else ctx.device


def exchange_ints(values: list[int], ctx: Context, tag: str) -> list[list[int]]:
    """Every process's list of integers, in process order, after the handshake that checks
    that every process is in the operation ``tag`` (see :mod:`nbaccel.state.handshake`).

    One small all_gather when every list fits in 64 integers, two otherwise; on XLA one
    ``mesh_reduce`` under ``tag``. The lists may differ in length between processes.
    """
    if ctx.is_xla:
        # torch_xla is installed on TPU hosts only
        import torch_xla.core.xla_model as xm

        return [list(v) for v in xm.mesh_reduce(f"nbaccel.ops.{tag}", list(values), list)]
    return handshake(tag, values, _meta_device(ctx), ctx.num_processes)


def exchange_layouts(
    layout: Layout,
    ctx: Context,
    op: str,
    extra: list[int] | None = None,
    parts: list[torch.Tensor] | None = None,
    wanted: int = 0,
) -> tuple[list[Layout], list[list[int]], Any]:
    """Every process's layout for the operation ``op``, in process order; each process's
    ``extra`` integers; and, when ``parts`` (uint8 CPU tensors, gloo; see
    :func:`~nbaccel.state.handshake.handshake_payload`, as ``wanted``) is given, every
    process's payload bytes from the same collective (else None)."""
    values = layout.encode() + list(extra or [])
    if parts is None or ctx.is_xla:
        every, rows = exchange_ints(values, ctx, op), None
    else:
        every, rows = handshake_payload(
            op, values, _meta_device(ctx), ctx.num_processes, parts, wanted
        )
    layouts = [Layout.decode(v) for v in every]
    extras = [v[len(one.encode()) :] for v, one in zip(every, layouts, strict=True)]
    return layouts, extras, rows
