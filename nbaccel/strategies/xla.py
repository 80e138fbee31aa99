"""XLA (TPU): models stay unwrapped; gradients are all-reduced before each optimizer step."""

from __future__ import annotations

from typing import Any

from .base import Strategy

__all__ = ["XlaStrategy"]


class XlaStrategy(Strategy):
    """TPU cores: ``torch_xla`` reduces gradients across cores before the step."""

    def reduce_gradients(self, optimizer: Any) -> None:
        """All-reduce gradients across TPU cores (once per step)."""
        import torch_xla.core.xla_model as xm

        xm.reduce_gradients(optimizer)
