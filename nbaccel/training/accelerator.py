"""The Accelerator: it builds its parts and hands each call to the part that owns the state
involved (preparer, precision, training steps, checkpointer, tracking, collectives, trigger,
uneven inputs, parallel view; process control is the state's). See docs/architecture.md."""

from __future__ import annotations

import gc
from typing import Any

import torch
from torch import nn

from ..data import DataLoaderConfiguration, skip_first_batches
from ..enums import DynamoBackend, RNGType
from ..kwargs_handlers import AutocastKwargs, KwargsHandler
from ..modeling import recompiled
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
from .forwarding import forward, view
from .parallel import ParallelView
from .preparation import Preparer
from .steps import TrainingSteps
from .tracking import Tracking
from .uneven import Trigger, UnevenInputs, trigger_sync_in_backward

__all__ = ["Accelerator"]


class Accelerator:
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

    optimizer_step_was_skipped = property(
        lambda self: any(opt.step_was_skipped for opt in self._preparer.optimizers),
        doc="True when the fp16 scaler skipped the last optimizer step (inf/nan gradients).",
    )
    _models = property(lambda self: self._preparer.models)
    _optimizers = property(lambda self: self._preparer.optimizers)
    _schedulers = property(lambda self: self._preparer.schedulers)
    _dataloaders = property(lambda self: self._preparer.dataloaders)

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

    # -- training steps ----------------------------------------------------------------------
    backward = forward("_steps", TrainingSteps.backward)
    accumulate = forward("_steps", TrainingSteps.accumulate)
    unscale_gradients = forward("_steps", TrainingSteps.unscale_gradients)
    clip_grad_norm_ = forward("_steps", TrainingSteps.clip_grad_norm_)
    clip_grad_value_ = forward("_steps", TrainingSteps.clip_grad_value_)

    step = property(
        lambda self: self._steps.step,
        lambda self, value: setattr(self._steps, "step", value),
        doc="Batches seen through accumulate() (saved with the state).",
    )

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

    # -- checkpointing (docs/checkpointing.md) ---------------------------------------------
    save_state = forward("_checkpointer", Checkpointer.save_state)
    load_state = forward("_checkpointer", Checkpointer.load_state)
    save_model = forward("_checkpointer", Checkpointer.save_model)
    save = forward("_checkpointer", Checkpointer.save)
    get_state_dict = forward("_checkpointer", Checkpointer.get_state_dict)
    register_for_checkpointing = forward("_checkpointer", Checkpointer.register_for_checkpointing)
    register_save_state_pre_hook = forward(
        "_checkpointer", Checkpointer.register_save_state_pre_hook
    )
    register_load_state_pre_hook = forward(
        "_checkpointer", Checkpointer.register_load_state_pre_hook
    )
    save_iteration = view("_checkpointer", Checkpointer.save_iteration)
    _custom_objects = view("_checkpointer", Checkpointer.custom_objects)

    # -- tracking (docs/tracking.md) ---------------------------------------------------------
    init_trackers = forward("_tracking", Tracking.init_trackers)
    log = forward("_tracking", Tracking.log)
    get_tracker = forward("_tracking", Tracking.get_tracker)
    end_training = forward("_tracking", Tracking.end_training)
    trackers = view("_tracking", Tracking.trackers)

    # -- processes: the state's helpers --------------------------------------------------------
    print = forward("state", AcceleratorState.print)
    wait_for_everyone = forward("state", AcceleratorState.wait_for_everyone)
    main_process_first = forward("state", AcceleratorState.main_process_first)
    local_main_process_first = forward("state", AcceleratorState.local_main_process_first)
    split_between_processes = forward("state", AcceleratorState.split_between_processes)
    on_main_process = forward("state", AcceleratorState.on_main_process)
    on_local_main_process = forward("state", AcceleratorState.on_local_main_process)
    on_last_process = forward("state", AcceleratorState.on_last_process)
    on_process = forward("state", AcceleratorState.on_process)
    on_local_process = forward("state", AcceleratorState.on_local_process)

    # -- collectives, the trigger, uneven inputs ---------------------------------------------
    gather = forward("_collectives", Collectives.gather)
    gather_for_metrics = forward("_collectives", Collectives.gather_for_metrics)
    reduce = forward("_collectives", Collectives.reduce)
    pad_across_processes = forward("_collectives", Collectives.pad_across_processes)
    set_trigger = forward("_trigger", Trigger.set_trigger)
    check_trigger = forward("_trigger", Trigger.check_trigger)
    flag_tensor = property(lambda self: self._trigger.flag_tensor, doc="The trigger's flag.")
    join_uneven_inputs = forward("_uneven", UnevenInputs.join_uneven_inputs)

    # -- parallelism ---------------------------------------------------------------------------
    parallelism_config = view("_parallel", ParallelView.parallelism_config)
    torch_device_mesh = view("_parallel", ParallelView.torch_device_mesh)
    data_parallel_rank = view("_parallel", ParallelView.data_parallel_rank)
    data_parallel_shard_rank = view("_parallel", ParallelView.data_parallel_shard_rank)
    tensor_parallel_rank = view("_parallel", ParallelView.tensor_parallel_rank)
    context_parallel_rank = view("_parallel", ParallelView.context_parallel_rank)
    pipeline_parallel_rank = view("_parallel", ParallelView.pipeline_parallel_rank)

    maybe_context_parallel = forward("_parallel", ParallelView.maybe_context_parallel)

    def profile(self, profile_handler: ProfileKwargs | None = None) -> Any:
        """Context: profile the block with ``torch.profiler``; yields the profiler. With
        ``output_trace_dir`` each process writes ``profile_{process_index}.json`` there."""
        handler = profile_handler or self.profile_handler or ProfileKwargs()
        return profiled(handler, self.state.process_index, self.state.wait_for_everyone)

    # -- plain views ---------------------------------------------------------------------------
    is_fsdp2 = view("_parallel", ParallelView.is_fsdp2)
    is_composable_parallelism_enabled = view("_parallel", ParallelView.is_fsdp2)
    multi_device = view("_parallel", ParallelView.multi_device)
    fp8_backend = view("_parallel", ParallelView.fp8_backend)
    should_save_model = property(lambda self: True, doc="Every process takes part in saving.")
    deepspeed_plugin = property(lambda self: self.state.deepspeed_plugin, doc="The selected one.")
    deepspeed_engine_wrapped = property(
        lambda self: getattr(self.strategy, "wrapped", None), doc="The engine backward() drives."
    )
    non_blocking = property(lambda self: self.dataloader_config.non_blocking)
    use_seedable_sampler = property(lambda self: self.dataloader_config.use_seedable_sampler)
    use_stateful_dataloader = property(
        lambda self: getattr(self.dataloader_config, "use_stateful_dataloader", False)
    )

    def verify_device_map(self, model: nn.Module) -> bool:
        """True when a submodule's ``hf_device_map`` spreads it over several devices."""
        return any(len(getattr(m, "hf_device_map", {})) > 1 for m in model.modules())

    def __repr__(self) -> str:
        return f"Accelerator(\n{self.state!r})"
