"""``prepare()`` under DeepSpeed: the data loaders as always, then one engine built from the
model, optimizer and scheduler of the same call, with the config's ``"auto"`` values filled
from what the call holds (as Accelerate's ``_prepare_deepspeed`` does)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from ..deepspeed.autofill import Found
from ..deepspeed.dummies import DummyOptim, DummyScheduler
from ..launch.events import report_engine
from ..optim import AcceleratedScheduler
from ..plugins import GradientAccumulationPlugin
from ..precision import Precision
from ..state import AcceleratorState
from ..strategies import Strategy, strategy_for
from ..strategies.deepspeed import DeepSpeedStrategy
from .arguments import deepspeed_accumulation
from .preparation import Preparer, _is_scheduler, _mark

__all__ = ["choose_strategy", "prepare_with_deepspeed"]


def choose_strategy(
    state: AcceleratorState, precision: Precision, accumulation: GradientAccumulationPlugin
) -> tuple[Strategy, GradientAccumulationPlugin]:
    """The strategy for the state's distributed type, and the accumulation it trains with:
    under DeepSpeed the plugin's steps (DeepSpeed also scales fp16 losses itself, and each
    rank reports its engine and stage to the launch's dashboard)."""
    strategy = strategy_for(
        state.distributed_type, state.fsdp_plugin, lambda: AcceleratorState().deepspeed_plugin
    )
    if isinstance(strategy, DeepSpeedStrategy):
        precision.scaler = None
        accumulation = deepspeed_accumulation(strategy.plugin, accumulation)
        report_engine("deepspeed", strategy.plugin.zero_stage)
    return strategy, accumulation


def _kind(obj: Any) -> str:
    if isinstance(obj, nn.Module):
        return "model"
    if isinstance(obj, (torch.optim.Optimizer, DummyOptim)):
        return "optimizer"
    if isinstance(obj, DummyScheduler) or _is_scheduler(obj):
        return "scheduler"
    if isinstance(obj, DataLoader):
        return "loader"
    return "other"


def _check_optimizer_trains(model: nn.Module, optimizer: Any) -> None:
    """A torch optimizer must hold the model's own parameters: DeepSpeed maps each of them."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        return
    owned = {id(p) for p in model.parameters()}
    foreign = sum(1 for g in optimizer.param_groups for p in g["params"] if id(p) not in owned)
    if foreign:
        raise ValueError(
            f"The optimizer {type(optimizer).__name__} holds {foreign} parameter(s) that are not "
            f"the parameters of the {type(model).__name__} given with it; build the optimizer "
            "from model.parameters() of the model you pass to prepare()."
        )


def prepare_with_deepspeed(
    preparer: Preparer,
    strategy: DeepSpeedStrategy,
    objects: tuple[Any, ...],
    accumulation_steps: int,
) -> tuple[Any, ...]:
    """Prepare ``objects`` for DeepSpeed; models come back as engines."""
    kinds = [_kind(obj) for obj in objects]
    for kind in ("model", "optimizer", "scheduler"):
        if kinds.count(kind) > 1:
            raise ValueError(
                f"Under DeepSpeed one prepare() call builds one engine, so it takes one {kind}; "
                f"it got {kinds.count(kind)}. Prepare each model with its optimizer in its own "
                "call (and select its plugin with state.select_deepspeed_plugin(name))."
            )
    if "optimizer" in kinds and "model" not in kinds:
        raise ValueError(
            "Under DeepSpeed the optimizer is prepared together with its model: pass both to "
            "the same accelerator.prepare(model, optimizer, loader) call."
        )

    def find(kind: str) -> Any:
        return next((obj for obj, k in zip(objects, kinds, strict=True) if k == kind), None)

    loaders = [obj for obj, kind in zip(objects, kinds, strict=True) if kind == "loader"]
    found = Found(
        batch_sizes=[loader.batch_size for loader in loaders],
        split_batches=preparer.dataloader_config.split_batches,
        num_processes=preparer.num_processes,
        model=find("model"),
        optimizer=find("optimizer"),
        scheduler=find("scheduler"),
    )
    model = found.model
    if model is not None:  # checked before anything moves; initialize fills the config
        preparer._check_new(model, "model")
        _check_optimizer_trains(model, found.optimizer)
    engine, optimizer, scheduler = strategy.initialize(
        found, accumulation_steps, preparer.precision.in_effect
    )
    if model is not None:  # autocast around the forward once the engine exists (a refused
        preparer.precision.wrap_forward(model)  # prepare() leaves the model as it was)
    result = list(objects)
    for index, kind in enumerate(kinds):
        if kind == "loader":
            result[index] = _mark(preparer.data_loader(objects[index]))
        elif kind == "model" and engine is not None:
            preparer.models.append(engine)
            preparer._remember(objects[index], engine)
            result[index] = _mark(engine)
        elif kind == "optimizer" and optimizer is not None:
            preparer.optimizers.append(optimizer)
            preparer._remember(objects[index], optimizer)
            result[index] = _mark(optimizer)
    for index, kind in enumerate(kinds):
        if kind != "scheduler":
            continue
        prepared = scheduler
        if prepared is None:  # a torch scheduler DeepSpeed does not step: it follows the step
            prepared = AcceleratedScheduler(
                objects[index],
                [optimizer] if optimizer is not None else preparer.optimizers,
                step_with_optimizer=preparer.step_scheduler_with_optimizer,
                split_batches=preparer.dataloader_config.split_batches,
                num_processes=preparer.num_processes,
            )
        preparer.schedulers.append(prepared)
        preparer._remember(objects[index])
        result[index] = _mark(prepared)
    return tuple(result)
