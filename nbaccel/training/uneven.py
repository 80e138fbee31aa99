"""Processes that see different data: the early-stop trigger, joining uneven inputs, and a
backward pass that synchronises inside ``no_sync``."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from .. import ops
from ..state import AcceleratorState
from .preparation import Preparer

__all__ = ["Trigger", "UnevenInputs", "trigger_sync_in_backward"]


class Trigger:
    """A flag any process can raise and every process reads at the next check."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.flag_tensor: torch.Tensor | None = None

    def set_trigger(self) -> None:
        """Raise this process's flag; the next :meth:`check_trigger` on every process sees it
        (e.g. stop training when one process finds the loss is NaN)."""
        self.flag_tensor = torch.tensor(1, device=self.device)

    def check_trigger(self) -> bool:
        """True on every process when any process called :meth:`set_trigger` since the last
        check (then the flag is lowered). A collective: every process must call it."""
        if self.flag_tensor is None:
            self.flag_tensor = torch.tensor(0, device=self.device)
        raised = ops.reduce(self.flag_tensor, reduction="sum")
        if int(raised.item()) >= 1:
            self.flag_tensor = torch.tensor(0, device=self.device)
            return True
        return False


def _override_even_batches(loaders: list[Any], even_batches: bool) -> list[tuple[Any, bool]]:
    changed = []
    skipped = False
    for loader in loaders:
        sampler = getattr(loader, "_shard_sampler", None)
        if sampler is None:
            skipped = True
            continue
        changed.append((sampler, sampler.even_batches))
        sampler.even_batches = even_batches
    if skipped:
        warnings.warn(
            "Overriding even_batches is only supported for map-style datasets, yet some "
            "dataloaders given were iterable (or dispatched); those keep their setting.",
            stacklevel=4,
        )
    return changed


class UnevenInputs:
    """``join_uneven_inputs`` over the prepared loaders (their ``even_batches`` may change
    inside the block)."""

    def __init__(self, state: AcceleratorState, preparer: Preparer, dataloader_config: Any) -> None:
        self.state = state
        self._preparer = preparer
        self._config = dataloader_config

    @contextlib.contextmanager
    def join_uneven_inputs(self, joinables: Any, even_batches: bool | None = None) -> Iterator[Any]:
        """Context for processes that see different numbers of batches: DDP models (and
        ``ZeroRedundancyOptimizer``) passed in ``joinables`` shadow the collectives of the
        processes that finished early (torch's ``Join``), so no process hangs.

        Args:
            joinables: the prepared models (and joinable optimizers).
            even_batches: override the prepared loaders' ``even_batches`` inside the block
                (``False`` to let processes see uneven batch counts).
        """
        if self.state.num_processes == 1:
            yield joinables
            return
        # torch.distributed.algorithms pulls in DDP's join machinery: only several processes
        from torch.distributed.algorithms.join import Join, Joinable

        changed = []
        if even_batches is not None:
            changed = _override_even_batches(self._preparer.dataloaders, even_batches)
        even = self._config.even_batches if even_batches is None else even_batches
        joinable = [j for j in joinables if isinstance(j, Joinable)]
        if len(joinable) != len(list(joinables)) and not even:
            warnings.warn(
                "join_uneven_inputs: only DistributedDataParallel models and joinable "
                "optimizers take part in the join; the other objects are ignored.",
                stacklevel=3,
            )
        try:
            with Join(
                joinable, enable=not even and bool(joinable), throw_on_early_termination=False
            ):
                yield joinables
        finally:
            for sampler, value in changed:
                sampler.even_batches = value


@contextlib.contextmanager
def trigger_sync_in_backward(model: nn.Module) -> Iterator[None]:
    """Context: the backward inside synchronises DDP gradients even within ``no_sync``
    (a no-op for models that are not ``DistributedDataParallel``)."""
    if not isinstance(model, nn.parallel.DistributedDataParallel):
        yield
        return
    before = (model.require_backward_grad_sync, model.require_forward_param_sync)
    model.require_backward_grad_sync = True
    model.require_forward_param_sync = True
    model.reducer.prepare_for_backward([])
    try:
        yield
    finally:
        model.require_backward_grad_sync, model.require_forward_param_sync = before
