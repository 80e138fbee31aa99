"""The Accelerator facade: small, it composes state, precision, strategy, data and ops."""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Iterator
from typing import Any, TypeVar

import torch
from torch import nn

from .accelerator_args import (
    UNSET,
    accumulation_plugin,
    check_arguments,
    handler_map,
    resolve_dataloader_config,
)
from .accelerator_extras import AcceleratorExtrasMixin
from .accumulation import AccumulationCounter
from .checkpoint.mixin import CheckpointingMixin
from .config.resolve import configured_dynamo_plugin
from .data import DataLoaderConfiguration, skip_first_batches
from .enums import DynamoBackend, RNGType
from .fsdp import FullyShardedDataParallelPlugin
from .fsdp.config_keys import launched_with_fsdp
from .kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
)
from .modeling import recompiled
from .plugins import (
    GradientAccumulationPlugin,
    ProjectConfiguration,
    TorchDynamoPlugin,
    launched_dynamo_plugin,
)
from .precision import Precision
from .preparation import Preparer
from .process_control import CollectivesMixin, ProcessControlMixin
from .profiling import ProfileKwargs
from .state import AcceleratorState, GradientState
from .state.registry import STATE
from .strategies import strategy_for
from .tracking import TrackingMixin, resolve_log_with
from .unsupported import refuse_plugins

__all__ = ["Accelerator"]

T = TypeVar("T")


class Accelerator(
    AcceleratorExtrasMixin, CheckpointingMixin, TrackingMixin, ProcessControlMixin, CollectivesMixin
):
    """One object for distributed, mixed-precision training with unchanged model code.

    Create it inside the function you launch (``notebook_launcher``, ``nbaccel launch``,
    ``torchrun``) or in a plain script for one process. See ``docs/accelerator.md``.
    """

    def __init__(
        self,
        device_placement: bool = True,
        split_batches: bool = UNSET,
        mixed_precision: str | None = None,
        gradient_accumulation_steps: int = 1,
        cpu: bool = False,
        dataloader_config: DataLoaderConfiguration | None = None,
        deepspeed_plugin: Any = None,
        fsdp_plugin: Any = None,
        torch_tp_plugin: Any = None,
        megatron_lm_plugin: Any = None,
        rng_types: list[str | RNGType] | None = None,
        log_with: Any = None,
        project_dir: str | None = None,
        project_config: ProjectConfiguration | None = None,
        gradient_accumulation_plugin: GradientAccumulationPlugin | None = None,
        step_scheduler_with_optimizer: bool = True,
        kwargs_handlers: list[KwargsHandler] | None = None,
        dynamo_backend: str | DynamoBackend | None = None,
        dynamo_plugin: TorchDynamoPlugin | None = None,
        deepspeed_plugins: Any = None,
        parallelism_config: Any = None,
        *,
        dispatch_batches: bool | None = UNSET,
        even_batches: bool = UNSET,
        use_seedable_sampler: bool = UNSET,
        fp16: bool | None = None,
    ) -> None:
        if fp16:
            warnings.warn(
                "fp16=True is deprecated; use mixed_precision='fp16'.", FutureWarning, stacklevel=2
            )
            mixed_precision = mixed_precision or "fp16"
        refuse_plugins(
            "Accelerator",
            deepspeed_plugin=deepspeed_plugin,
            megatron_lm_plugin=megatron_lm_plugin,
            torch_tp_plugin=torch_tp_plugin,
        )
        if fsdp_plugin is None and STATE.accelerator is None and launched_with_fsdp():
            fsdp_plugin = FullyShardedDataParallelPlugin()  # the launch's fsdp_config
        check_arguments(
            device_placement=device_placement,
            dataloader_config=dataloader_config,
            project_dir=project_dir,
            project_config=project_config,
            dynamo_plugin=dynamo_plugin,
            fsdp_plugin=fsdp_plugin,
            step_scheduler_with_optimizer=step_scheduler_with_optimizer,
        )
        handlers = handler_map(kwargs_handlers)
        accumulation = accumulation_plugin(
            gradient_accumulation_steps, gradient_accumulation_plugin
        )
        if dynamo_backend is not None and dynamo_plugin is None:
            dynamo_plugin = TorchDynamoPlugin(backend=dynamo_backend)
        elif dynamo_plugin is None:
            # the config file's dynamo_config, else the ACCELERATE_DYNAMO_* variables
            dynamo_plugin = configured_dynamo_plugin() or launched_dynamo_plugin()
        pg = handlers.get(InitProcessGroupKwargs)
        fresh = STATE.accelerator is None
        try:
            self.state = AcceleratorState(
                mixed_precision=mixed_precision,
                cpu=cpu,
                dynamo_plugin=dynamo_plugin,
                fsdp_plugin=fsdp_plugin,
                _from_accelerator=True,
                **(pg.to_kwargs() if pg is not None else {}),
            )
            self.precision = Precision(
                self.state.mixed_precision,
                self.state.device,
                autocast_kwargs=handlers.get(AutocastKwargs),  # type: ignore[arg-type]
                scaler_kwargs=handlers.get(GradScalerKwargs),  # type: ignore[arg-type]
            )
            strategy = strategy_for(self.state.distributed_type, self.state.fsdp_plugin)
        except Exception:
            if fresh:  # a refused setting must not stick to the process (e.g. fp8 on CPU)
                STATE.accelerator = None
            raise
        self.gradient_state = GradientState(gradient_accumulation_plugin=accumulation)
        self.dataloader_config = resolve_dataloader_config(
            dataloader_config,
            {
                "split_batches": split_batches,
                "dispatch_batches": dispatch_batches,
                "even_batches": even_batches,
                "use_seedable_sampler": use_seedable_sampler,
            },
        )
        self.project_configuration = project_config or ProjectConfiguration(project_dir=project_dir)
        if project_dir is not None:
            self.project_configuration.set_directories(project_dir)
        resolve_log_with(log_with, self.project_configuration.logging_dir)  # bad values fail now
        self.log_with = log_with
        self.device_placement = device_placement
        self.rng_types = [str(RNGType.parse(r, "rng_types")) for r in (rng_types or ["generator"])]
        self.scaler = self.precision.scaler
        self.strategy = strategy
        ddp = handlers.get(DistributedDataParallelKwargs)
        self._preparer = Preparer(
            device=self.state.device,
            num_processes=self.state.num_processes,
            process_index=self.state.process_index,
            strategy=self.strategy,
            precision=self.precision,
            device_placement=device_placement,
            ddp_kwargs=ddp.to_kwargs() if ddp is not None else {},
            ddp_comm_hook=ddp.register_comm_hook if ddp is not None else None,  # type: ignore[attr-defined]
            dynamo_plugin=dynamo_plugin,
            dataloader_config=self.dataloader_config,
            rng_types=self.rng_types,
            step_scheduler_with_optimizer=step_scheduler_with_optimizer,
        )
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        self._setup_parallelism(parallelism_config, deepspeed_plugins)
        self.profile_handler = handlers.get(ProfileKwargs)  # type: ignore[assignment]
        self._accumulation = AccumulationCounter()
        self.step = 0

    # -- attributes --------------------------------------------------------------------------
    device = property(lambda self: self.state.device, doc="The device of this process.")
    distributed_type = property(lambda self: self.state.distributed_type, doc="The setup.")
    num_processes = property(lambda self: self.state.num_processes, doc="Processes in the job.")
    process_index = property(lambda self: self.state.process_index, doc="This process's index.")
    local_process_index = property(
        lambda self: self.state.local_process_index, doc="Index of this process on its machine."
    )
    is_main_process = property(lambda self: self.state.is_main_process, doc="Index 0.")
    is_local_main_process = property(
        lambda self: self.state.is_local_main_process, doc="First process of its machine."
    )
    is_last_process = property(lambda self: self.state.is_last_process, doc="Highest index.")
    mixed_precision = property(lambda self: self.state.mixed_precision, doc="The precision.")
    use_distributed = property(lambda self: self.state.use_distributed, doc="Several processes.")
    sync_gradients = property(
        lambda self: self.gradient_state.sync_gradients,
        lambda self, value: self.gradient_state._set_sync_gradients(value),
        doc="This step synchronises gradients (settable, as in Accelerate).",
    )
    split_batches = property(lambda self: self.dataloader_config.split_batches)
    dispatch_batches = property(lambda self: self.dataloader_config.dispatch_batches)
    even_batches = property(lambda self: self.dataloader_config.even_batches)
    project_dir = property(lambda self: self.project_configuration.project_dir)
    logging_dir = property(lambda self: self.project_configuration.logging_dir)
    fp8_recipe_handler = None

    @property
    def gradient_accumulation_steps(self) -> int:
        """Batches accumulated per optimizer step."""
        return self.gradient_state.num_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, steps: int) -> None:
        plugin = accumulation_plugin(steps, None)
        current = self.gradient_state.plugin_kwargs
        current["num_steps"] = plugin.num_steps
        GradientState(GradientAccumulationPlugin(**current))

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """True when the fp16 scaler skipped the last optimizer step (inf/nan gradients)."""
        return any(opt.step_was_skipped for opt in self._preparer.optimizers)

    @property
    def _models(self) -> list[nn.Module]:
        return self._preparer.models

    @property
    def _optimizers(self) -> list[Any]:
        return self._preparer.optimizers

    @property
    def _schedulers(self) -> list[Any]:
        return self._preparer.schedulers

    @property
    def _dataloaders(self) -> list[Any]:
        return self._preparer.dataloaders

    # -- prepare -----------------------------------------------------------------------------
    def prepare(self, *args: Any, device_placement: list[bool] | None = None) -> Any:
        """Prepare models, optimizers, schedulers and data loaders; returns them in order."""
        prepared = self._preparer.prepare(args, device_placement)
        return prepared[0] if len(prepared) == 1 else prepared

    def prepare_model(
        self, model: nn.Module, device_placement: bool | None = None, evaluation_mode: bool = False
    ) -> nn.Module:
        """Prepare one model (``evaluation_mode=True``: placement and precision, no DDP)."""
        return self._preparer.model(model, device_placement, evaluation_mode)

    def prepare_optimizer(
        self, optimizer: torch.optim.Optimizer, device_placement: bool | None = None
    ) -> Any:
        """Prepare one optimizer."""
        return self._preparer.optimizer(optimizer, device_placement)

    def prepare_scheduler(self, scheduler: Any) -> Any:
        """Prepare one learning-rate scheduler (after its optimizer)."""
        return self._preparer.scheduler(scheduler)

    def prepare_data_loader(
        self,
        data_loader: Any,
        device_placement: bool | None = None,
        slice_fn_for_dispatch: Any = None,
    ) -> Any:
        """Prepare one data loader."""
        return self._preparer.data_loader(data_loader, device_placement, slice_fn_for_dispatch)

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        """The same loader without its first ``num_batches`` batches (to resume an epoch)."""
        return skip_first_batches(dataloader, num_batches)

    # -- training steps ----------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward()``, divided for accumulation and scaled under fp16."""
        loss = loss / self.gradient_accumulation_steps
        if self.scaler is not None:
            self.scaler.scale(loss).backward(**kwargs)
        else:
            loss.backward(**kwargs)

    def autocast(self, autocast_handler: AutocastKwargs | None = None) -> Any:
        """Context manager: run the block in the mixed-precision dtype."""
        return self.precision.autocast(autocast_handler)

    @contextlib.contextmanager
    def accumulate(self, *models: nn.Module) -> Iterator[None]:
        """Context for one batch under gradient accumulation: gradients synchronise (and the
        optimizer steps) every ``gradient_accumulation_steps`` batches and on the last batch."""
        sync = self._accumulation.advance()
        self.step += 1
        with contextlib.ExitStack() as stack:
            if not sync and not self.gradient_state.sync_each_batch:
                for model in models:
                    stack.enter_context(self.no_sync(model))
            yield

    def no_sync(self, model: nn.Module) -> Any:
        """Context: backward passes inside do not synchronise ``model``'s gradients."""
        return self.strategy.no_sync(model)

    def unscale_gradients(self, optimizer: Any = None) -> None:
        """Unscale fp16 gradients of ``optimizer`` (all prepared ones when None)."""
        if self.scaler is None or not self.sync_gradients:
            return
        targets = [optimizer] if optimizer is not None else self._preparer.optimizers
        for opt in targets:
            opt.unscale_gradients()

    def clip_grad_norm_(
        self, parameters: Any, max_norm: float, norm_type: float = 2
    ) -> torch.Tensor:
        """Clip the gradients' total norm (after unscaling fp16 gradients); returns the norm."""
        self.unscale_gradients()
        return self.strategy.clip_grad_norm_(parameters, max_norm, norm_type)

    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        """Clip every gradient value to ``[-clip_value, clip_value]`` (after unscaling)."""
        self.unscale_gradients()
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    def unwrap_model(
        self, model: nn.Module, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True
    ) -> nn.Module:
        """The user's model inside any DDP / FSDP wrappers (a compiled model stays compiled
        around it unless ``keep_torch_compile=False``); see :func:`nbaccel.modeling.recompiled`."""
        inner = self.strategy.unwrap_model(model)
        if not keep_fp32_wrapper:
            Precision.unwrap_forward(inner)
        return recompiled(model, inner) if keep_torch_compile else inner

    def free_memory(self, *objects: Any) -> tuple[Any, ...]:
        """Drop the references this Accelerator holds, collect garbage, empty device caches."""
        self._preparer.release()
        self._accumulation.reset()
        self.step = 0
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return tuple(None for _ in objects)

    clear = free_memory

    def __repr__(self) -> str:
        return f"Accelerator(\n{self.state!r})"
