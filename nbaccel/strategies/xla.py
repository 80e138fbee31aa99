"""XLA (TPU): models stay unwrapped; gradients are all-reduced before each optimizer step."""

from __future__ import annotations

from typing import Any

from .base import Strategy

__all__ = ["XlaStrategy", "xla_fsdp_strategy"]


class XlaStrategy(Strategy):
    """TPU cores: ``torch_xla`` reduces gradients across cores before the step."""

    def reduce_gradients(self, optimizer: Any) -> None:
        """All-reduce gradients across TPU cores (once per step)."""
        # torch_xla is installed on TPU hosts only
        import torch_xla.core.xla_model as xm

        xm.reduce_gradients(optimizer)


def xla_fsdp_strategy(plugin: Any) -> Strategy:
    """The strategy for an FSDP plugin on the XLA device; refused (before anything is
    prepared) with what to do instead.

    torch's FSDP cannot run on the XLA device, and sharding through torch_xla's
    ``XlaFullyShardedDataParallel`` (``fsdp_config`` keys ``xla``, ``xla_fsdp_settings``,
    ``xla_fsdp_grad_ckpt``) is not available in nbaccel; Accelerate 1.15 has no XLA FSDP either.
    """
    asked = (
        "fsdp_config sets xla: true (torch_xla's XlaFullyShardedDataParallel)"
        if getattr(plugin, "xla", False)
        else "FSDP was asked for on the XLA device, where torch's FSDP cannot run"
    )
    raise NotImplementedError(
        f"{asked}; nbaccel does not shard models on the XLA device. Drop fsdp_plugin (or the "
        "config file's fsdp_config) to train data-parallel on every XLA core, or run FSDP on "
        "GPUs or CPUs (without PJRT_DEVICE / a TPU)."
    )
