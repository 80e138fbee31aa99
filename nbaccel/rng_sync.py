"""``synchronize_rng_state(s)``: give every process the main process's random state."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import torch

from .enums import RNGType
from .ops import broadcast
from .state import PartialState

__all__ = ["synchronize_rng_state", "synchronize_rng_states"]

_DEVICE_FAMILIES = ("mlu", "sdaa", "musa", "npu", "xpu", "hpu", "neuron")


def _read(kind: RNGType, generator: torch.Generator | None) -> torch.Tensor:
    if kind == RNGType.TORCH:
        return torch.get_rng_state()
    if kind == RNGType.CUDA:
        return torch.cuda.get_rng_state()
    if kind == RNGType.GENERATOR:
        if generator is None:
            raise ValueError(
                "synchronize_rng_state(rng_type='generator') needs the generator: pass "
                "generator=<the torch.Generator to synchronise>."
            )
        return generator.get_state()
    if kind == RNGType.XLA:
        if "torch_xla" not in sys.modules:
            raise RuntimeError("Can't synchronize XLA seeds: torch_xla is not in use here.")
        import torch_xla.core.xla_model as xm

        return torch.tensor(xm.get_rng_state())
    backend = getattr(torch, str(kind), None)
    if backend is None or not backend.is_available():
        raise RuntimeError(
            f"Can't synchronize {str(kind).upper()} seeds: there is no {kind} device here. "
            "Pick rng_types among 'torch', 'generator' (and 'cuda' on GPUs)."
        )
    return backend.get_rng_state()


def _write(kind: RNGType, state: torch.Tensor, generator: torch.Generator | None) -> None:
    if kind == RNGType.TORCH:
        torch.set_rng_state(state)
    elif kind == RNGType.CUDA:
        torch.cuda.set_rng_state(state)
    elif kind == RNGType.GENERATOR:
        assert generator is not None  # _read refused a missing generator
        generator.set_state(state)
    elif kind == RNGType.XLA:
        import torch_xla.core.xla_model as xm

        xm.set_rng_state(int(state.item()))
    else:
        getattr(torch, str(kind)).set_rng_state(state)


def synchronize_rng_state(
    rng_type: RNGType | str | None = None, generator: torch.Generator | None = None
) -> None:
    """Copy the main process's state of one generator (``rng_type``: ``"torch"``,
    ``"cuda"``, ``"xla"``, ``"generator"`` with ``generator``, ...) to every process.
    Nothing happens on one process; every process must call it (it is a collective)."""
    if rng_type is None:
        return
    kind = RNGType(RNGType.parse(rng_type, "rng_type"))
    state = _read(kind, generator)
    partial = PartialState()
    if partial.num_processes > 1:
        on_device = state.to(partial.device)
        state = broadcast(on_device, from_process=0).cpu()
    _write(kind, state, generator)


def synchronize_rng_states(
    rng_types: Iterable[RNGType | str], generator: torch.Generator | None = None
) -> None:
    """:func:`synchronize_rng_state` for each of ``rng_types``."""
    kinds: Any = rng_types
    if isinstance(kinds, (str, RNGType)):
        raise TypeError(f"rng_types must be a list such as ['torch'], got {rng_types!r}.")
    for kind in kinds:
        synchronize_rng_state(kind, generator=generator)
