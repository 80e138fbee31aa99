"""The strategy interface, and the one-process strategy (no wrapping, nothing to sync)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

__all__ = ["Strategy"]


class Strategy:
    """One process: models are used as they are."""

    def wrap_model(self, model: nn.Module, **kwargs: Any) -> nn.Module:
        """Wrap ``model`` for training (here: unchanged)."""
        return model

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager[Any]:
        """A context in which backward passes do not synchronise gradients."""
        return contextlib.nullcontext()

    def reduce_gradients(self, optimizer: Any) -> None:
        """Reduce gradients before an optimizer step when the wrapper does not (XLA)."""

    def clip_grad_norm_(
        self, parameters: Iterable[torch.Tensor] | torch.Tensor, max_norm: float, norm_type: float
    ) -> torch.Tensor:
        """Clip the gradients' total norm; returns the norm (sharded strategies override)."""
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def release(self) -> None:
        """Forget what the strategy holds of prepared models (``free_memory``)."""

    @staticmethod
    def unwrap_model(model: nn.Module) -> nn.Module:
        """Peel DDP, FSDP-style ``.module`` and ``torch.compile`` wrappers off ``model``."""
        while True:
            inner = getattr(model, "_orig_mod", None)
            if isinstance(inner, nn.Module):
                model = inner
            elif isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
                model = model.module
            else:
                return model
