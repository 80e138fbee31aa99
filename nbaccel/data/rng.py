"""Synchronising random number generators between processes: process 0's state wins."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist

from ..enums import RNGType
from ..state import PartialState

__all__ = ["synchronize_rng_state", "synchronize_rng_states"]


def _device_module(name: str) -> Any:
    """``torch.cuda`` / ``torch.xpu`` / ... when that device is usable here, else None."""
    module = getattr(torch, name, None)
    available = getattr(module, "is_available", None)
    return module if available is not None and available() else None


def _read(kind: RNGType, generator: torch.Generator | None, strict: bool) -> torch.Tensor | None:
    """The generator's state; None (``strict=False``) or an error where it does not exist."""
    if kind is RNGType.TORCH:
        return torch.get_rng_state()
    if kind is RNGType.GENERATOR:
        if generator is None:
            raise ValueError(
                "synchronize_rng_state(rng_type='generator') needs the generator: pass "
                "generator=<the torch.Generator to synchronise>."
            )
        return generator.get_state()
    if kind is RNGType.XLA:
        if "torch_xla" not in sys.modules:
            if strict:
                raise RuntimeError("Can't synchronize XLA seeds: torch_xla is not in use here.")
            return None
        # torch_xla is installed on TPU hosts only
        import torch_xla.core.xla_model as xm

        return torch.tensor(int(xm.get_rng_state()), dtype=torch.int64)
    module = _device_module(kind.value)
    if module is None and strict:
        raise RuntimeError(
            f"Can't synchronize {kind.value.upper()} seeds: there is no {kind.value} device "
            "here. Pick rng_types among 'torch', 'generator' (and 'cuda' on GPUs)."
        )
    return None if module is None else module.get_rng_state()


def _write(kind: RNGType, state: torch.Tensor, generator: torch.Generator | None) -> None:
    if kind is RNGType.TORCH:
        torch.set_rng_state(state)
    elif kind is RNGType.GENERATOR:
        assert generator is not None
        generator.set_state(state)
    elif kind is RNGType.XLA:
        # torch_xla is installed on TPU hosts only
        import torch_xla.core.xla_model as xm

        xm.set_rng_state(int(state.item()))
    else:
        getattr(torch, kind.value).set_rng_state(state)


def _broadcast(state: torch.Tensor) -> torch.Tensor:
    """Process 0's ``state`` on every process (unchanged without a process group)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() <= 1:
        return state
    if dist.get_backend() == "gloo":
        dist.broadcast(state, src=0)
        return state

    on_device = state.to(PartialState().device)
    dist.broadcast(on_device, src=0)
    return on_device.cpu()


def synchronize_rng_state(
    rng_type: str | RNGType | None = None,
    generator: torch.Generator | None = None,
    *,
    strict: bool = True,
) -> None:
    """Give every process the state process 0's generator of kind ``rng_type`` has.

    Every process must call this together (it is a broadcast); ``None`` does nothing.
    ``"generator"`` synchronises ``generator``; ``"torch"`` torch's global generator;
    ``"cuda"``, ``"xpu"``, ``"npu"``, ``"mlu"`` and ``"xla"`` the device's generator. A device
    that is not present is an error, as in Accelerate; with ``strict=False`` (what prepared
    data loaders use) it is skipped, on every process alike.
    """
    if rng_type is None:
        return
    kind = RNGType(RNGType.parse(rng_type, "rng_type"))
    state = _read(kind, generator, strict)
    if state is None:
        return
    _write(kind, _broadcast(state), generator)


def synchronize_rng_states(
    rng_types: Iterable[str | RNGType],
    generator: torch.Generator | None = None,
    *,
    strict: bool = True,
) -> None:
    """:func:`synchronize_rng_state` for each of ``rng_types``, in order."""
    if isinstance(rng_types, (str, RNGType)):
        raise TypeError(f"rng_types must be a list such as ['torch'], got {rng_types!r}.")
    for rng_type in rng_types:
        synchronize_rng_state(RNGType.parse(rng_type, "rng_types"), generator, strict=strict)
