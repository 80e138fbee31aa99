"""DDP: several processes, gradients averaged by ``DistributedDataParallel``."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn

from .base import Strategy

__all__ = ["DDPStrategy"]


class DDPStrategy(Strategy):
    """Wraps models that have trainable parameters in ``DistributedDataParallel``."""

    def wrap_model(self, model: nn.Module, **kwargs: Any) -> nn.Module:
        """Wrap ``model``; ``device`` picks ``device_ids`` on GPUs; other kwargs go to DDP."""
        device: torch.device | None = kwargs.pop("device", None)
        if not any(p.requires_grad for p in model.parameters()):
            return model  # nothing to synchronise (DDP refuses such models)
        device_ids = [device.index] if device is not None and device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=device_ids, **kwargs)

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager[Any]:
        """DDP's own ``no_sync`` for wrapped models."""
        if isinstance(model, nn.parallel.DistributedDataParallel):
            return model.no_sync()
        return contextlib.nullcontext()
