"""LocalSGD: each process trains on its own for a few steps, then the processes average their
parameters, so that gradients need not travel on every step (Accelerate's
``accelerate.local_sgd.LocalSGD``)."""

from __future__ import annotations

import contextlib
from types import TracebackType
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..enums import DistributedType
from ..validation import is_int

if TYPE_CHECKING:
    from .accelerator import Accelerator

__all__ = ["LocalSGD"]

# Where every process holds whole parameters and DDP's gradient sync can be paused
# (Accelerate's list, device families nbaccel never selects included).
_SUPPORTED = (
    DistributedType.NO,
    DistributedType.MULTI_CPU,
    DistributedType.MULTI_GPU,
    DistributedType.MULTI_XPU,
    DistributedType.MULTI_MLU,
    DistributedType.MULTI_HPU,
    DistributedType.MULTI_SDAA,
    DistributedType.MULTI_MUSA,
    DistributedType.MULTI_NPU,
    DistributedType.MULTI_NEURON,
)

_OTHERWISE = "Train without LocalSGD: gradients then synchronise on every step."
_INSTEAD = {
    DistributedType.FSDP: "Build the Accelerator without fsdp_plugin (DDP) to use LocalSGD, "
    "or keep FSDP and train without LocalSGD.",
}


class LocalSGD:
    """Average the model's parameters across processes every ``local_sgd_steps`` steps.

    Inside the ``with`` block DDP does not synchronise gradients (the prepared model's
    ``no_sync``): each process's optimizer steps on its own gradients, and :meth:`step`,
    called after each optimizer step, replaces every parameter by its mean over the
    processes on every ``local_sgd_steps``-th call. Leaving the block normally averages once
    more, so every process ends with the same model. On one process it changes nothing (the
    steps are still counted).

    Args:
        accelerator: the ``Accelerator`` that prepared ``model``.
        model: the prepared model (or any module every process holds whole).
        local_sgd_steps: optimizer steps between two averagings (at least 1).
        enabled: ``False`` turns it into a no-op: gradients synchronise as usual.

    Raises:
        NotImplementedError: under FSDP, XLA, DeepSpeed or Megatron-LM, where a process does
            not hold whole parameters or the gradient sync cannot be paused (as Accelerate does).
    """

    def __init__(
        self,
        accelerator: Accelerator,
        model: nn.Module,
        local_sgd_steps: int,
        enabled: bool = True,
    ) -> None:
        kind = accelerator.distributed_type
        if kind not in _SUPPORTED:
            raise NotImplementedError(
                "LocalSGD runs where every process holds the whole model and DDP's gradient "
                "sync can be paused (DistributedType NO, MULTI_CPU, MULTI_GPU); this "
                f"Accelerator runs {kind.name}, where it is not supported (as in Accelerate). "
                f"{_INSTEAD.get(kind, _OTHERWISE)}"
            )
        if not is_int(local_sgd_steps) or local_sgd_steps < 1:
            raise ValueError(
                f"LocalSGD(local_sgd_steps=...) must be an int of at least 1 (the optimizer "
                f"steps between two averagings), got {local_sgd_steps!r}."
            )
        if not isinstance(enabled, bool):
            raise TypeError(f"LocalSGD(enabled=...) must be True or False, got {enabled!r}.")
        if not isinstance(model, nn.Module):
            raise TypeError(
                "LocalSGD(model=...) must be the torch.nn.Module returned by "
                f"accelerator.prepare, got {type(model).__name__}."
            )
        self.accelerator = accelerator
        self.model = model
        self.local_sgd_steps = local_sgd_steps
        self.enabled = enabled and kind != DistributedType.NO
        self.num_steps = 0
        self._no_sync: contextlib.AbstractContextManager[Any] | None = None

    def __enter__(self) -> LocalSGD:
        if self.enabled:
            self._no_sync = self.accelerator.no_sync(self.model)
            self._no_sync.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if self._no_sync is None:
            return None
        no_sync, self._no_sync = self._no_sync, None
        try:
            # After an error the other processes may be elsewhere: averaging (a collective)
            # would wait for them forever, so the error goes up without it.
            if exc_type is None:
                self._average()
        finally:
            no_sync.__exit__(exc_type, exc, tb)
        return None

    def step(self) -> None:
        """Count one optimizer step; on every ``local_sgd_steps``-th, average the parameters
        (a collective: every process must call it as often)."""
        self.num_steps += 1
        if self.enabled and self.num_steps % self.local_sgd_steps == 0:
            self._average()

    def _average(self) -> None:
        """Replace every parameter by its mean over the processes, in place (the optimizer
        keeps its references to the same tensors)."""
        self.accelerator.wait_for_everyone()
        parameters = list(self.model.parameters())
        if not parameters:
            return
        means = self.accelerator.reduce([p.detach() for p in parameters], reduction="mean")
        with torch.no_grad():
            for parameter, mean in zip(parameters, means, strict=True):
                parameter.copy_(mean)
