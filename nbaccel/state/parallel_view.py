"""AcceleratorState's view of the parallelism configuration (set by the Accelerator)."""

from __future__ import annotations

from typing import Any

from .registry import STATE

__all__ = ["ParallelismStateMixin"]


class ParallelismStateMixin:
    """``parallelism_config``, ``device_mesh`` and ``deepspeed_plugins`` of AcceleratorState."""

    @property
    def parallelism_config(self) -> Any:
        """The ``ParallelismConfig`` the Accelerator was given, or None."""
        record = STATE.accelerator
        return record.parallelism_config if record is not None else None

    @property
    def device_mesh(self) -> Any:
        """The device mesh built from :attr:`parallelism_config` (None without one)."""
        config = self.parallelism_config
        return getattr(config, "device_mesh", None)

    @property
    def deepspeed_plugins(self) -> dict[str, Any] | None:
        """The DeepSpeed plugins by name, or None when DeepSpeed is not in use."""
        record = STATE.accelerator
        return record.deepspeed_plugins if record is not None else None
