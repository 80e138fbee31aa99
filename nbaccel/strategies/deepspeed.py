"""DeepSpeed: ZeRO stages 0-3 and offload through DeepSpeed's own engine.

``prepare()`` builds one engine from the model, the optimizer and the scheduler it is given
(:meth:`DeepSpeedStrategy.initialize`); ``Accelerator.backward`` runs the engine's backward and,
on the last batch of an accumulation cycle, its step (clipping, optimizer, scheduler, zeroing).
Full weights of a stage-3 model are gathered module by module; checkpoints are the engine's.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..deepspeed.autofill import Found, fill_auto_values
from ..deepspeed.dummies import DummyOptim, DummyScheduler
from ..deepspeed.engine import (
    DeepSpeedEngineWrapper,
    DeepSpeedOptimizerWrapper,
    DeepSpeedSchedulerWrapper,
    import_deepspeed,
    initialize_engine,
    offload_optimizer,
    share_master_partitions,
)
from ..deepspeed.plugin import DeepSpeedPlugin
from ..environment import (
    choose_deepspeed_accelerator,
    fp16_unavailable_note,
    precision_in_effect,
)
from ..state import AcceleratorState
from .base import Strategy

__all__ = ["DeepSpeedStrategy", "is_engine"]

MODEL_NAME = "pytorch_model"


def is_engine(model: Any) -> bool:
    """True for a DeepSpeed engine (without importing deepspeed when it was never used)."""
    return any(cls.__name__ == "DeepSpeedEngine" for cls in type(model).__mro__)


class DeepSpeedStrategy(Strategy):
    """Models become DeepSpeed engines; ``plugin`` returns the active plugin at each call."""

    def __init__(self, plugin: Callable[[], DeepSpeedPlugin]) -> None:
        self._plugin = plugin
        self.engines: list[Any] = []
        self.wrapped: DeepSpeedEngineWrapper | None = None
        self._clip_warned = False

    @property
    def plugin(self) -> DeepSpeedPlugin:
        return self._plugin()

    # -- building ------------------------------------------------------------------------------
    def initialize(
        self, found: Found, accumulation_steps: int, mixed_precision: str
    ) -> tuple[Any, Any, Any]:
        """The engine, optimizer and scheduler for one ``prepare()`` call (each None when not
        given), after filling the active plugin's config from ``found``."""
        plugin = self.plugin
        device = AcceleratorState().device.type
        choose_deepspeed_accelerator(device)
        import_deepspeed()  # a missing extra is named before anything is filled
        plugin.set_mixed_precision(mixed_precision)
        _keep_fp16_off_where_it_does_not_train(plugin, device)
        fill_auto_values(plugin, found, accumulation_steps)
        model, optimizer, scheduler = found.model, found.optimizer, found.scheduler
        if model is None:
            return None, optimizer, scheduler
        plugin.set_moe_leaf_modules(model)
        kwargs: dict[str, Any] = {"model": model, "config_params": plugin.deepspeed_config}
        if isinstance(optimizer, DummyOptim):
            kwargs["model_parameters"] = optimizer.params
            if isinstance(scheduler, DummyScheduler) and scheduler.lr_scheduler_callable:
                kwargs["lr_scheduler"] = scheduler.lr_scheduler_callable
        elif optimizer is not None:
            kwargs["optimizer"] = self._offloaded(optimizer, plugin)
        engine, ds_optimizer, ds_scheduler = initialize_engine(**kwargs)
        share_master_partitions(engine)
        self.engines.append(engine)
        if self.wrapped is None:
            self.wrapped = DeepSpeedEngineWrapper(engine)
        else:
            warnings.warn(
                "This Accelerator already drives a DeepSpeed engine; backward() keeps stepping "
                "the first one. Use one Accelerator per engine.",
                UserWarning,
                stacklevel=4,
            )
        wrapped_optimizer = (
            DeepSpeedOptimizerWrapper(ds_optimizer) if ds_optimizer is not None else None
        )
        wrapped_scheduler = None
        if scheduler is not None and ds_scheduler is not None:
            wrapped_scheduler = DeepSpeedSchedulerWrapper(ds_scheduler, wrapped_optimizer)
        return engine, wrapped_optimizer, wrapped_scheduler

    @staticmethod
    def _offloaded(optimizer: Any, plugin: DeepSpeedPlugin) -> Any:
        """With optimizer offload, DeepSpeed's CPU version of a torch Adam / AdamW / Adagrad
        (as Accelerate maps it); another optimizer runs as it is, on the CPU partitions."""
        config = plugin.deepspeed_config
        device = plugin.get_value("zero_optimization.offload_optimizer.device", "none")
        if device == "none" or not config.get("zero_force_ds_cpu_optimizer", True):
            return optimizer
        mapped = offload_optimizer(optimizer)
        if mapped is None:
            config["zero_force_ds_cpu_optimizer"] = False
            return optimizer
        return mapped

    def wrap_model(self, model: nn.Module, **kwargs: Any) -> nn.Module:
        raise RuntimeError(
            "With DeepSpeed a model is prepared with its optimizer and data loader in one "
            "accelerator.prepare(model, optimizer, loader, ...) call."
        )

    # -- training steps ------------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, sync_gradients: bool, **kwargs: Any) -> None:
        """The engine's backward (it divides by the accumulation steps), then its step on a
        synchronising batch."""
        if self.wrapped is None:
            raise RuntimeError(
                "accelerator.backward() under DeepSpeed needs a prepared model: call "
                "accelerator.prepare(model, optimizer, loader) first."
            )
        self.wrapped.backward(loss, sync_gradients=sync_gradients, **kwargs)

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager[Any]:
        """Nothing: DeepSpeed accumulates by itself (the engine is told each boundary)."""
        return contextlib.nullcontext()

    def clip_grad_norm_(
        self, parameters: Iterable[torch.Tensor] | torch.Tensor, max_norm: float, norm_type: float
    ) -> torch.Tensor:
        """DeepSpeed clips inside its step, at the config's ``gradient_clipping``; this returns
        the total norm it measured."""
        configured = self.plugin.get_value("gradient_clipping")
        if not self._clip_warned and configured not in (None, "auto", max_norm):
            self._clip_warned = True
            warnings.warn(
                f"clip_grad_norm_(max_norm={max_norm}): DeepSpeed clips at its config's "
                f"gradient_clipping={configured} instead; set DeepSpeedPlugin("
                f"gradient_clipping={max_norm}) to change it.",
                UserWarning,
                stacklevel=4,
            )
        norm = self.wrapped.get_global_grad_norm() if self.wrapped is not None else None
        return norm if norm is not None else torch.tensor(0.0)

    # -- models ----------------------------------------------------------------------------
    @staticmethod
    def unwrap_model(model: nn.Module) -> nn.Module:
        """The model inside its engine (and any compile or DDP wrapper)."""
        while True:
            model = Strategy.unwrap_model(model)
            if not is_engine(model):
                return model
            model = getattr(model, "module")  # noqa: B009  (the engine's model)

    def full_state_dict(self, model: nn.Module, main: bool) -> dict[str, torch.Tensor]:
        """The model's whole state dict, on the CPU. Stage 3 gathers each module's shards in
        turn (every process must call it) and returns them where ``main``, ``{}`` elsewhere."""
        inner = self.unwrap_model(model)
        if self.plugin.get_value("zero_optimization.stage", 0) != 3:
            return {k: v.detach().cpu().clone() for k, v in inner.state_dict().items()}
        deepspeed = import_deepspeed()
        out: dict[str, torch.Tensor] = {}
        for prefix, module in inner.named_modules():
            params = list(module.parameters(recurse=False))
            with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
                if main:
                    out.update(_own_tensors(module, prefix))
        return out

    # -- checkpoints -------------------------------------------------------------------------
    def save_checkpoint(self, models: list[nn.Module], directory: Path) -> None:
        """Each engine's checkpoint (weights, optimizer shards, its scheduler) into
        ``directory/pytorch_model[_i]``; every process writes its own shards."""
        for index, model in enumerate(self._engines_of(models)):
            model.save_checkpoint(str(directory), tag=_tag(index))

    def load_checkpoint(self, models: list[nn.Module], directory: Path) -> None:
        """Load what :meth:`save_checkpoint` wrote into each engine."""
        for index, model in enumerate(self._engines_of(models)):
            tag = _tag(index)
            if not (directory / tag).is_dir():
                raise FileNotFoundError(
                    f"load_state: {directory} has no DeepSpeed checkpoint {tag}/ for model "
                    f"{index}; it was not saved by save_state() under DeepSpeed."
                )
            path, _ = model.load_checkpoint(str(directory), tag=tag)
            if path is None:
                raise RuntimeError(f"load_state: DeepSpeed could not load {directory / tag}.")

    @staticmethod
    def schedulers_not_saved(schedulers: list[Any]) -> list[Any]:
        """The prepared schedulers the engines' checkpoints do not hold (nbaccel saves those)."""
        return [s for s in schedulers if not isinstance(s, DeepSpeedSchedulerWrapper)]

    def _engines_of(self, models: list[nn.Module]) -> list[Any]:
        engines = [m for m in models if is_engine(m)]
        if len(engines) != len(models):
            raise ValueError(
                "Under DeepSpeed every prepared model is a DeepSpeed engine; prepare each model "
                "with its optimizer and data loader."
            )
        return engines

    def release(self) -> None:
        """Forget the engines (``free_memory``)."""
        for engine in self.engines:
            with contextlib.suppress(Exception):
                engine.destroy()
        self.engines.clear()
        self.wrapped = None


def _keep_fp16_off_where_it_does_not_train(plugin: DeepSpeedPlugin, device: str) -> None:
    """A config that enables fp16 (Accelerate's templates do) on a device that does not train
    in fp16 (the CPU) trains in full precision, with one warning: the fp16 rule."""
    if precision_in_effect("fp16", device) == "fp16" or not plugin.get_value("fp16.enabled"):
        return
    plugin.deepspeed_config["fp16"]["enabled"] = False
    warnings.warn(
        f"The DeepSpeed config enables fp16, but {fp16_unavailable_note(device)}: this run "
        'trains in full precision. Set "fp16": {"enabled": false} (or "auto") in the config, '
        'or enable "bf16" for mixed precision here.',
        UserWarning,
        stacklevel=5,
    )


def _own_tensors(module: nn.Module, prefix: str) -> dict[str, torch.Tensor]:
    """The module's own parameters and persistent buffers (not its children's), on the CPU."""
    skipped = module._non_persistent_buffers_set
    tensors = {**module._parameters, **module._buffers}
    return {
        f"{prefix}.{name}" if prefix else name: tensor.detach().cpu().clone()
        for name, tensor in tensors.items()
        if tensor is not None and name not in skipped
    }


def _tag(index: int) -> str:
    return MODEL_NAME if index == 0 else f"{MODEL_NAME}_{index}"
