"""The Accelerator: it builds its parts and hands each call to the part that owns the state
involved (preparer, precision, training steps, checkpointer, tracking, collectives, trigger,
uneven inputs, parallel view; process control is the state's). A call it only passes on is
a method written out with the part's signature, documented by the part's method through
``documented_by``, here or in the base class of its part's area (``facade_*.py``). See
docs/architecture.md."""

from __future__ import annotations

import contextlib
import gc
from typing import Any

import torch
from torch import nn

from ..data import DataLoaderConfiguration, skip_first_batches
from ..enums import DynamoBackend, RNGType
from ..kwargs_handlers import AutocastKwargs, KwargsHandler
from ..modeling import recompiled
from ..optim import AcceleratedOptimizer, AcceleratedScheduler
from ..plugins import (
    GradientAccumulationPlugin,
    ProjectConfiguration,
    TorchDynamoPlugin,
)
from ..precision import Precision
from ..profiling import ProfileKwargs, profiled
from ..state import AcceleratorState, GradientState
from ..state.registry import STATE
from ..strategies import DeepSpeedStrategy
from ..tracking import resolve_log_with
from ..unsupported import refuse_plugins
from .arguments import (
    UNSET,
    accumulation_plugin,
    check_arguments,
    handler_map,
    mixed_precision_of,
    project_configuration,
    resolve_dataloader_config,
    resolve_deepspeed_plugins,
    resolve_dynamo_plugin,
    resolve_fsdp_plugin,
)
from .checkpointer import Checkpointer
from .collectives import Collectives
from .deepspeed_prep import choose_strategy, prepare_with_deepspeed
from .documented import documented_by
from .facade_checkpointing import CheckpointingMethods
from .facade_collectives import CollectiveMethods
from .facade_parallel import ParallelMethods
from .facade_state import StateMethods
from .facade_tracking import TrackingMethods
from .parallel import ParallelView
from .preparation import Preparer
from .steps import TrainingSteps
from .tracking import Tracking
from .uneven import Trigger, UnevenInputs, trigger_sync_in_backward

__all__ = ["Accelerator"]


class Accelerator(
    StateMethods, CheckpointingMethods, TrackingMethods, CollectiveMethods, ParallelMethods
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
        mixed_precision = mixed_precision_of(mixed_precision, fp16)
        refuse_plugins(
            "Accelerator",
            megatron_lm_plugin=megatron_lm_plugin,
            torch_tp_plugin=torch_tp_plugin,
        )
        deepspeed_plugins = resolve_deepspeed_plugins(deepspeed_plugin, deepspeed_plugins)
        fsdp_plugin = resolve_fsdp_plugin(fsdp_plugin) if deepspeed_plugins is None else fsdp_plugin
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
        dynamo_plugin = resolve_dynamo_plugin(dynamo_backend, dynamo_plugin)
        pg = handlers.process_group
        fresh = STATE.accelerator is None
        try:
            self.state = AcceleratorState(
                mixed_precision=mixed_precision,
                cpu=cpu,
                dynamo_plugin=dynamo_plugin,
                fsdp_plugin=fsdp_plugin,
                deepspeed_plugin=deepspeed_plugins,
                _from_accelerator=True,
                **(pg.to_kwargs() if pg is not None else {}),
            )
            self.precision = Precision(
                self.state.mixed_precision,
                self.state.device,
                autocast_kwargs=handlers.autocast,
                scaler_kwargs=handlers.scaler,
            )
            strategy, accumulation = choose_strategy(self.state, self.precision, accumulation)
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
        self.project_configuration = project_configuration(project_config, project_dir)
        resolve_log_with(log_with, self.project_configuration.logging_dir)  # bad values fail now
        self.log_with = log_with
        self.device_placement = device_placement
        self.rng_types = [str(RNGType.parse(r, "rng_types")) for r in (rng_types or ["generator"])]
        self.scaler = self.precision.scaler
        self.strategy = strategy
        ddp = handlers.ddp
        self._preparer = Preparer(
            device=self.state.device,
            num_processes=self.state.num_processes,
            process_index=self.state.process_index,
            strategy=self.strategy,
            precision=self.precision,
            device_placement=device_placement,
            ddp_kwargs=ddp.to_kwargs() if ddp is not None else {},
            ddp_comm_hook=ddp.register_comm_hook if ddp is not None else None,
            dynamo_plugin=dynamo_plugin,
            dataloader_config=self.dataloader_config,
            rng_types=self.rng_types,
            step_scheduler_with_optimizer=step_scheduler_with_optimizer,
        )
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        self.profile_handler: ProfileKwargs | None = handlers.profile
        self._parallel = ParallelView(self.state, parallelism_config)
        self._steps = TrainingSteps(self.gradient_state, self.precision, strategy, self._preparer)
        self._checkpointer = Checkpointer(
            self.state,
            self.project_configuration,
            strategy,
            self._preparer,
            self.precision,
            self._steps,
        )
        self._tracking = Tracking(log_with, self.project_configuration, self.state)
        self._collectives = Collectives(self.gradient_state)
        self._trigger = Trigger(self.state.device)
        self._uneven = UnevenInputs(self.state, self._preparer, self.dataloader_config)

    # -- attributes --------------------------------------------------------------------------
    @property
    def sync_gradients(self) -> bool:
        """This step synchronises gradients (settable, as in Accelerate)."""
        return self.gradient_state.sync_gradients

    @sync_gradients.setter
    def sync_gradients(self, value: bool) -> None:
        self.gradient_state._set_sync_gradients(value)

    @property
    def split_batches(self) -> bool:
        return self.dataloader_config.split_batches

    @property
    def dispatch_batches(self) -> bool | None:
        return self.dataloader_config.dispatch_batches

    @property
    def even_batches(self) -> bool:
        return self.dataloader_config.even_batches

    @property
    def non_blocking(self) -> bool:
        return self.dataloader_config.non_blocking

    @property
    def use_seedable_sampler(self) -> bool:
        return self.dataloader_config.use_seedable_sampler

    @property
    def use_stateful_dataloader(self) -> bool:
        return getattr(self.dataloader_config, "use_stateful_dataloader", False)

    @property
    def project_dir(self) -> str | None:
        return self.project_configuration.project_dir

    @property
    def logging_dir(self) -> str | None:
        return self.project_configuration.logging_dir

    fp8_recipe_handler = None

    @property
    @documented_by(GradientState.num_steps)
    def gradient_accumulation_steps(self) -> int:
        return self.gradient_state.num_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, steps: int) -> None:
        plugin = accumulation_plugin(steps, None)
        current = self.gradient_state.plugin_kwargs
        current["num_steps"] = plugin.num_steps
        GradientState(GradientAccumulationPlugin(**current))

    @property
    def should_save_model(self) -> bool:
        """Every process takes part in saving."""
        return True

    @property
    def deepspeed_engine_wrapped(self) -> Any:
        """The engine backward() drives."""
        return getattr(self.strategy, "wrapped", None)

    # -- prepare -----------------------------------------------------------------------------
    def prepare(self, *args: Any, device_placement: list[bool] | None = None) -> Any:
        """Prepare models, optimizers, schedulers and data loaders; returns them in order.
        Under DeepSpeed the model comes back as DeepSpeed's engine (docs/deepspeed.md)."""
        if isinstance(self.strategy, DeepSpeedStrategy):
            steps = self.gradient_accumulation_steps
            prepared = prepare_with_deepspeed(self._preparer, self.strategy, args, steps)
        else:
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

    @property
    def _models(self) -> list[nn.Module]:
        return self._preparer.models

    @property
    def _optimizers(self) -> list[AcceleratedOptimizer]:
        return self._preparer.optimizers

    @property
    def _schedulers(self) -> list[AcceleratedScheduler]:
        return self._preparer.schedulers

    @property
    def _dataloaders(self) -> list[Any]:
        return self._preparer.dataloaders

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """True when the fp16 scaler skipped the last optimizer step (inf/nan gradients)."""
        return any(opt.step_was_skipped for opt in self._preparer.optimizers)

    # -- training steps: the TrainingSteps part, precision and strategy ------------------------
    @documented_by(TrainingSteps.backward)
    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        self._steps.backward(loss, **kwargs)

    @documented_by(TrainingSteps.accumulate)
    def accumulate(self, *models: nn.Module) -> contextlib.AbstractContextManager[None]:
        return self._steps.accumulate(*models)

    @documented_by(TrainingSteps.unscale_gradients)
    def unscale_gradients(self, optimizer: Any = None) -> None:
        self._steps.unscale_gradients(optimizer)

    @documented_by(TrainingSteps.clip_grad_norm_)
    def clip_grad_norm_(
        self, parameters: Any, max_norm: float, norm_type: float = 2
    ) -> torch.Tensor:
        return self._steps.clip_grad_norm_(parameters, max_norm, norm_type)

    @documented_by(TrainingSteps.clip_grad_value_)
    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        self._steps.clip_grad_value_(parameters, clip_value)

    @property
    def step(self) -> int:
        """Batches seen through accumulate() (saved with the state)."""
        return self._steps.step

    @step.setter
    def step(self, value: int) -> None:
        self._steps.step = value

    def autocast(self, autocast_handler: AutocastKwargs | None = None) -> Any:
        """Context manager: run the block in the mixed-precision dtype."""
        return self.precision.autocast(autocast_handler)

    def no_sync(self, model: nn.Module) -> Any:
        """Context: backward passes inside do not synchronise ``model``'s gradients."""
        return self.strategy.no_sync(model)

    trigger_sync_in_backward = staticmethod(trigger_sync_in_backward)

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
        self._steps.reset()
        self.strategy.release()
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return tuple(None for _ in objects)

    clear = free_memory

    # -- the rest ------------------------------------------------------------------------------
    def profile(self, profile_handler: ProfileKwargs | None = None) -> Any:
        """Context: profile the block with ``torch.profiler``; yields the profiler. With
        ``output_trace_dir`` each process writes ``profile_{process_index}.json`` there."""
        handler = profile_handler or self.profile_handler or ProfileKwargs()
        return profiled(handler, self.state.process_index, self.state.wait_for_everyone)

    def verify_device_map(self, model: nn.Module) -> bool:
        """True when a submodule's ``hf_device_map`` spreads it over several devices."""
        return any(len(getattr(m, "hf_device_map", {})) > 1 for m in model.modules())

    def __repr__(self) -> str:
        return f"Accelerator(\n{self.state!r})"
