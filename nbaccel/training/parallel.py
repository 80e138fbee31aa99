"""The Accelerator's view of how the job is laid out: its ``ParallelismConfig`` checked
against the job, the device mesh, this process's rank along each dimension, FSDP2, fp8."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from ..parallelism import ParallelismConfig
from ..state import AcceleratorState
from ..state.registry import STATE
from ..unsupported import refuse

__all__ = ["ParallelView"]


class ParallelView:
    """Checks a ``ParallelismConfig`` when the Accelerator is made, then answers rank
    questions from the state that holds it."""

    def __init__(self, state: AcceleratorState, config: Any) -> None:
        self.state = state
        if config is not None:
            self._adopt(config)

    def _adopt(self, config: Any) -> None:
        if not isinstance(config, ParallelismConfig):
            raise TypeError(
                f"Accelerator(parallelism_config=...) must be a ParallelismConfig, got "
                f"{type(config).__name__}."
            )
        config.check_supported()
        config.fit_to(self.state.num_processes)
        if config.dp_shard_enabled and self.state.fsdp_plugin is None:
            raise ValueError(
                f"ParallelismConfig(dp_shard_size={config.dp_shard_size}) shards the model: "
                "pass fsdp_plugin=FullyShardedDataParallelPlugin(...) too, or use "
                "dp_replicate_size for plain data parallelism."
            )
        if config.dp_shard_enabled and config.dp_replicate_enabled:
            raise NotImplementedError(
                "nbaccel shards over every process: hybrid sharding (dp_replicate_size > 1 "
                "with dp_shard_size > 1) is not run. Use dp_shard_size=<processes>."
            )
        if self.state.num_processes > 1:
            config.get_device_mesh(self.state.device.type)
        if STATE.accelerator is not None:
            STATE.accelerator.parallelism_config = config

    @property
    def parallelism_config(self) -> ParallelismConfig | None:
        """The ``ParallelismConfig`` given to the Accelerator, or None."""
        return self.state.parallelism_config

    @property
    def torch_device_mesh(self) -> Any:
        """The device mesh built from :attr:`parallelism_config` (None without one)."""
        config = self.parallelism_config
        return config.device_mesh if config is not None else None

    def _mesh_rank(self, dim: str, enabled: bool, what: str) -> int:
        if self.parallelism_config is None:
            raise RuntimeError(f"{what} is not configured. Set `parallelism_config` first.")
        mesh = self.torch_device_mesh
        return int(mesh.get_local_rank(dim)) if enabled and mesh is not None else 0

    @property
    def is_fsdp2(self) -> bool:
        """True when the FSDP plugin in use asks for FSDP2 (the composable ``fully_shard``)."""
        return bool(self.state.is_fsdp2)

    @property
    def multi_device(self) -> bool:
        """True when several processes each drive an accelerator device (GPUs)."""
        return self.state.num_processes > 1 and self.state.device.type not in ("cpu", "meta")

    @property
    def fp8_backend(self) -> str:
        """``"AO"`` (torchao) under ``mixed_precision="fp8"``, else ``"NO"``."""
        return "AO" if self.state.mixed_precision == "fp8" else "NO"

    @property
    def data_parallel_rank(self) -> int:
        """This process's index along ``dp_replicate`` (0 when it is not enabled)."""
        config = self.parallelism_config
        enabled = config is not None and config.dp_replicate_enabled
        return self._mesh_rank("dp_replicate", enabled, "Data parallelism")

    @property
    def data_parallel_shard_rank(self) -> int:
        """This process's index along ``dp_shard`` (0 when it is not enabled)."""
        config = self.parallelism_config
        enabled = config is not None and config.dp_shard_enabled
        return self._mesh_rank("dp_shard", enabled, "Shard-based data parallelism")

    @property
    def tensor_parallel_rank(self) -> int:
        """Always 0 with a config (nbaccel runs no tensor parallelism)."""
        return self._mesh_rank("tp", False, "Tensor parallelism")

    @property
    def context_parallel_rank(self) -> int:
        """Context parallelism is not run: raises ``NotImplementedError``."""
        refuse("tensor, context or sequence parallelism", "Accelerator.context_parallel_rank")

    @property
    def pipeline_parallel_rank(self) -> int:
        """Pipeline parallelism is not run: raises ``NotImplementedError``."""
        refuse("pipeline parallelism", "Accelerator.pipeline_parallel_rank")

    def maybe_context_parallel(
        self,
        buffers: list[torch.Tensor] | None = None,
        buffer_seq_dims: list[int] | None = None,
        no_restore_buffers: set[torch.Tensor] | None = None,
    ) -> contextlib.AbstractContextManager[None]:
        """Context parallelism is never enabled in nbaccel (``cp_size > 1`` is refused), so
        the block runs as it is, as in Accelerate without ``cp_size``."""
        return contextlib.nullcontext()
