"""``prepare()``: turn the user's models, optimizers, schedulers and data loaders into the
prepared versions, in the order given, and remember them."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from ..data import DataLoaderConfiguration, prepare_data_loader
from ..modeling import (
    ParameterMoves,
    check_quantized_placement,
    compile_regions,
    move_model_to_device,
)
from ..optim import AcceleratedOptimizer, AcceleratedScheduler
from ..plugins import TorchDynamoPlugin
from ..precision import Precision
from ..strategies import Strategy

__all__ = ["Preparer"]
_DDP = nn.parallel.DistributedDataParallel


def _mark(prepared: Any) -> Any:
    """Flag ``prepared`` as Accelerate does (``_is_accelerate_prepared``)."""
    try:
        prepared._is_accelerate_prepared = True
    except (AttributeError, TypeError):
        pass
    return prepared


def _is_scheduler(obj: Any) -> bool:
    return isinstance(obj, torch.optim.lr_scheduler.LRScheduler) or (
        hasattr(obj, "step") and hasattr(obj, "optimizer") and hasattr(obj, "get_last_lr")
    )


@dataclass
class Preparer:
    """Prepares objects for one Accelerator and keeps references to them.

    Attributes:
        device: where models and batches go.
        num_processes: processes in the job.
        process_index: this process's index.
        strategy: wraps models (DDP, ...).
        precision: autocast, scaler and fp8.
        device_placement: the Accelerator's default for moving objects to ``device``.
        ddp_kwargs: extra arguments for ``DistributedDataParallel``.
        ddp_comm_hook: called with each DDP-wrapped model (registers a communication hook).
        dynamo_plugin: ``torch.compile`` options, or None.
        dataloader_config: how data loaders are sharded.
        rng_types: generators synchronised between processes.
        step_scheduler_with_optimizer: schedulers step with the optimizer.
    """

    device: torch.device
    num_processes: int
    process_index: int
    strategy: Strategy
    precision: Precision
    device_placement: bool = True
    ddp_kwargs: dict[str, Any] = field(default_factory=dict)
    ddp_comm_hook: Callable[[nn.Module], None] | None = None
    dynamo_plugin: TorchDynamoPlugin | None = None
    dataloader_config: DataLoaderConfiguration = field(default_factory=DataLoaderConfiguration)
    rng_types: list[str] | None = None
    step_scheduler_with_optimizer: bool = True
    models: list[nn.Module] = field(default_factory=list)
    optimizers: list[AcceleratedOptimizer] = field(default_factory=list)
    schedulers: list[AcceleratedScheduler] = field(default_factory=list)
    dataloaders: list[Any] = field(default_factory=list)
    _seen: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)
    _moves: ParameterMoves = field(default_factory=ParameterMoves)

    # -- pickling (an Accelerator with its prepared objects pickles, as in Accelerate) ---------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_seen"] = list(self._seen)  # a WeakSet does not pickle; its members do
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        seen = state.pop("_seen", [])
        self.__dict__.update(state)
        self._seen = weakref.WeakSet()
        self._remember(*seen)

    # -- the entry point ---------------------------------------------------------------------
    def prepare(
        self, objects: tuple[Any, ...], device_placement: list[bool] | None
    ) -> tuple[Any, ...]:
        """Prepare ``objects`` (schedulers after everything else), returned in order."""
        if device_placement is not None and not isinstance(device_placement, (list, tuple)):
            raise TypeError(
                "prepare(device_placement=...) must be a list with one True/False per object, "
                f"got {type(device_placement).__name__} ({device_placement!r})."
            )
        if device_placement is not None and len(device_placement) != len(objects):
            raise ValueError(
                f"prepare(device_placement=...) has {len(device_placement)} entries for "
                f"{len(objects)} objects; give one True/False per object."
            )
        places: list[bool | None] = [None] * len(objects)
        if device_placement is not None:
            places = list(device_placement)
        self._check_optimizers(objects)
        result: list[Any] = list(objects)
        for i, obj in enumerate(objects):
            if not _is_scheduler(obj):
                result[i] = self._one(obj, places[i])
        for i, obj in enumerate(objects):
            if _is_scheduler(obj):
                result[i] = _mark(self.scheduler(obj))
        return tuple(result)

    def _one(self, obj: Any, place: bool | None) -> Any:
        if isinstance(obj, nn.Module):
            return _mark(self.model(obj, place))
        if isinstance(obj, torch.optim.Optimizer):
            return _mark(self.optimizer(obj, place))
        if isinstance(obj, DataLoader):
            return _mark(self.data_loader(obj, place))
        return obj

    def _check_new(self, obj: Any, kind: str) -> None:
        try:
            seen = obj in self._seen
        except TypeError:  # not weak-referenceable: cannot have been registered
            return
        if seen or isinstance(obj, (AcceleratedOptimizer, AcceleratedScheduler)):
            raise ValueError(
                f"This {kind} ({type(obj).__name__}) was already prepared. Pass each object to "
                "prepare() once and keep using what it returned."
            )

    def _remember(self, *objs: Any) -> None:
        for obj in objs:
            try:
                self._seen.add(obj)
            except TypeError:
                pass

    def _check_optimizers(self, given: tuple[Any, ...]) -> None:
        """Before anything is prepared: warn about an optimizer that holds none of the
        parameters of the models given here or prepared before (Accelerate accepts it)."""
        models = [*self.models, *(obj for obj in given if isinstance(obj, nn.Module))]
        if not models:
            return
        known = {id(p) for m in models for p in m.parameters()}
        names = ", ".join(sorted({type(m).__name__ for m in models}))
        for original in given:
            if isinstance(original, torch.optim.Optimizer):
                params = [p for g in original.param_groups for p in g["params"]]
                if params and not any(id(p) in known for p in params):
                    warnings.warn(
                        f"The optimizer {type(original).__name__} holds none of the parameters "
                        f"of the prepared model(s) ({names}); stepping it will not train them. "
                        "It was probably built from another model (or from a copy): build the "
                        "optimizer from model.parameters() of the model you pass to prepare().",
                        UserWarning,
                        stacklevel=4,
                    )

    # -- one kind each -----------------------------------------------------------------------
    def model(
        self, model: nn.Module, device_placement: bool | None = None, evaluation_mode: bool = False
    ) -> nn.Module:
        """Move ``model`` to the device, add mixed precision, wrap it (DDP...), compile it.

        A model that this Accelerator prepared already comes back as it is (no double wrap).
        """
        if any(model is prepared for prepared in self.models):
            return model
        self._check_new(model, "model")
        place = self.device_placement if device_placement is None else device_placement
        if check_quantized_placement(model, self.device, self.num_processes > 1):
            place = False  # an 8-/4-bit model stays where its device map put it
        has_meta = any(t.is_meta for t in (*model.parameters(), *model.buffers()))
        if place and not has_meta:  # a model still on "meta" is materialised by its strategy
            before = list(model.parameters())
            move_model_to_device(model, self.device)
            self._moves.record(before, model)
            for prepared in self.optimizers:  # prepared before this model (XLA: new params)
                self._moves.repoint(prepared.optimizer)
        model = self.precision.prepare_fp8(model)
        self.precision.wrap_forward(model)
        wrapped = model
        dynamo = self.dynamo_plugin
        compiling = dynamo is not None and str(dynamo.backend) != "NO"
        regional = compiling and bool(dynamo.use_regional_compilation)  # type: ignore[union-attr]
        if regional:  # blocks compiled one by one, inside the DDP / FSDP wrapper
            wrapped = compile_regions(model, **dynamo.to_kwargs())  # type: ignore[union-attr]
        if not evaluation_mode:
            wrapped = self.strategy.wrap_model(wrapped, device=self.device, **self.ddp_kwargs)
            if self.ddp_comm_hook is not None and isinstance(wrapped, _DDP):
                self.ddp_comm_hook(wrapped)
        if compiling and not regional:
            wrapped = torch.compile(wrapped, **dynamo.to_kwargs())  # type: ignore[union-attr, assignment]
        self.models.append(wrapped)
        self._remember(model, wrapped)
        return wrapped

    def optimizer(
        self, optimizer: torch.optim.Optimizer, device_placement: bool | None = None
    ) -> AcceleratedOptimizer:
        """Wrap ``optimizer`` so it steps only on synchronising steps (through the scaler)."""
        self._check_new(optimizer, "optimizer")
        place = self.device_placement if device_placement is None else device_placement
        self._moves.repoint(optimizer)
        prepared = AcceleratedOptimizer(
            optimizer,
            device_placement=place,
            scaler=self.precision.scaler,
            device=self.device,
            gradient_reducer=self.strategy.reduce_gradients,
        )
        self.optimizers.append(prepared)
        self._remember(optimizer, prepared)
        return prepared

    def scheduler(self, scheduler: Any) -> AcceleratedScheduler:
        """Wrap ``scheduler`` so that it follows the prepared optimizers."""
        self._check_new(scheduler, "scheduler")
        target = getattr(scheduler, "optimizer", None)
        own = [opt for opt in self.optimizers if opt.optimizer is target]
        prepared = AcceleratedScheduler(
            scheduler,
            own or self.optimizers,
            step_with_optimizer=self.step_scheduler_with_optimizer,
            split_batches=self.dataloader_config.split_batches,
            num_processes=self.num_processes,
        )
        self.schedulers.append(prepared)
        self._remember(scheduler)
        return prepared

    def data_loader(
        self,
        loader: DataLoader,
        device_placement: bool | None = None,
        slice_fn_for_dispatch: Any = None,
    ) -> Any:
        """Shard ``loader`` across processes (any sampler) and move batches to the device."""
        self._check_new(loader, "data loader")
        config = self.dataloader_config
        place = self.device_placement if device_placement is None else device_placement
        prepared = prepare_data_loader(
            loader,
            device=self.device,
            num_processes=self.num_processes,
            process_index=self.process_index,
            split_batches=config.split_batches,
            put_on_device=place,
            rng_types=self.rng_types,
            dispatch_batches=config.dispatch_batches,
            even_batches=config.even_batches,
            slice_fn_for_dispatch=slice_fn_for_dispatch,
            use_seedable_sampler=config.use_seedable_sampler,
            data_seed=config.data_seed,
            non_blocking=config.non_blocking,
            use_stateful_dataloader=config.use_stateful_dataloader,
        )
        self.dataloaders.append(prepared)
        self._remember(loader, prepared)
        return prepared

    def release(self) -> None:
        """Drop every reference to prepared objects."""
        self.models.clear()
        self.optimizers.clear()
        self.schedulers.clear()
        self.dataloaders.clear()
