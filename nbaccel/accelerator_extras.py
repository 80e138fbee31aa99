"""More of the Accelerator's public methods: early-stop triggers, joining uneven inputs,
forced gradient sync, profiling, and the parallelism view (config, mesh, ranks)."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from . import ops
from .constants import PROFILE_PATTERN_NAME
from .parallelism import ParallelismConfig
from .profiling import ProfileKwargs
from .state import AcceleratorState
from .state.registry import STATE
from .unsupported import refuse

__all__ = ["AcceleratorExtrasMixin"]


class AcceleratorExtrasMixin:
    """Methods composed into :class:`nbaccel.Accelerator` (see ``docs/compatibility.md``)."""

    state: AcceleratorState
    dataloader_config: Any
    flag_tensor: torch.Tensor | None = None
    profile_handler: ProfileKwargs | None = None

    # -- triggers ----------------------------------------------------------------------------
    def set_trigger(self) -> None:
        """Raise this process's flag; the next :meth:`check_trigger` on every process sees it
        (e.g. stop training when one process finds the loss is NaN)."""
        self.flag_tensor = torch.tensor(1, device=self.state.device)

    def check_trigger(self) -> bool:
        """True on every process when any process called :meth:`set_trigger` since the last
        check (then the flag is lowered). A collective: every process must call it."""
        if self.flag_tensor is None:
            self.flag_tensor = torch.tensor(0, device=self.state.device)
        raised = ops.reduce(self.flag_tensor, reduction="sum")
        if int(raised.item()) >= 1:
            self.flag_tensor = torch.tensor(0, device=self.state.device)
            return True
        return False

    # -- uneven inputs -------------------------------------------------------------------------
    def _override_even_batches(self, even_batches: bool) -> list[tuple[Any, bool]]:
        changed = []
        skipped = False
        for loader in getattr(self, "_dataloaders", []):
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
        from torch.distributed.algorithms.join import Join, Joinable

        changed = self._override_even_batches(even_batches) if even_batches is not None else []
        even = self.dataloader_config.even_batches if even_batches is None else even_batches
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

    @staticmethod
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

    # -- profiling -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def profile(self, profile_handler: ProfileKwargs | None = None) -> Iterator[Any]:
        """Context: profile the block with ``torch.profiler``; yields the profiler. With
        ``output_trace_dir`` each process writes ``profile_{process_index}.json`` there."""
        handler = profile_handler or self.profile_handler or ProfileKwargs()
        with handler.build() as profiler:
            yield profiler
        if handler.output_trace_dir is None:
            return
        os.makedirs(handler.output_trace_dir, exist_ok=True)
        name = PROFILE_PATTERN_NAME.format(suffix=self.state.process_index)
        profiler.export_chrome_trace(os.path.join(handler.output_trace_dir, name))
        self.state.wait_for_everyone()

    # -- parallelism ---------------------------------------------------------------------------
    def _setup_parallelism(self, config: Any, deepspeed_plugins: Any) -> None:
        if deepspeed_plugins is not None:
            refuse("DeepSpeed", "Accelerator(deepspeed_plugins=...)")
        if config is None:
            return
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

    @contextlib.contextmanager
    def maybe_context_parallel(
        self,
        buffers: list[torch.Tensor] | None = None,
        buffer_seq_dims: list[int] | None = None,
        no_restore_buffers: set[torch.Tensor] | None = None,
    ) -> Iterator[None]:
        """Context parallelism is never enabled in nbaccel (``cp_size > 1`` is refused), so
        the block runs as it is, as in Accelerate without ``cp_size``."""
        yield

    # -- plain views -----------------------------------------------------------------------
    @property
    def is_fsdp2(self) -> bool:
        """True when the FSDP plugin in use asks for FSDP2."""
        return bool(self.state.is_fsdp2)

    @property
    def is_composable_parallelism_enabled(self) -> bool:
        """True with FSDP2 (the composable ``fully_shard`` API)."""
        return self.is_fsdp2

    @property
    def multi_device(self) -> bool:
        """True when several processes each drive an accelerator device (GPUs)."""
        return self.state.num_processes > 1 and self.state.device.type not in ("cpu", "meta")

    @property
    def should_save_model(self) -> bool:
        """True: every process takes part in saving (each writes what it should)."""
        return True

    @property
    def deepspeed_plugin(self) -> None:
        """Always None: nbaccel does not run DeepSpeed."""
        return None

    @property
    def fp8_backend(self) -> str:
        """``"AO"`` (torchao) under ``mixed_precision="fp8"``, else ``"NO"``."""
        return "AO" if self.state.mixed_precision == "fp8" else "NO"

    non_blocking = property(lambda self: self.dataloader_config.non_blocking)
    use_seedable_sampler = property(lambda self: self.dataloader_config.use_seedable_sampler)
    use_stateful_dataloader = property(
        lambda self: getattr(self.dataloader_config, "use_stateful_dataloader", False)
    )

    def verify_device_map(self, model: nn.Module) -> bool:
        """True when a submodule carries an ``hf_device_map`` spreading it over several
        devices (big-model inference), which training must not prepare."""
        return any(len(getattr(m, "hf_device_map", {})) > 1 for m in model.modules())
