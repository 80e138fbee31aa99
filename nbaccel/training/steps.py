"""The Accelerator's training-step part: batch counting under gradient accumulation, the
scaled backward pass, gradient unscaling and clipping."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from ..precision import Precision
from ..state import GradientState
from ..strategies import DeepSpeedStrategy, Strategy
from .preparation import Preparer

__all__ = ["TrainingSteps"]


@dataclasses.dataclass(eq=False)
class TrainingSteps:
    """Owns the step count and the position inside an accumulation cycle.

    Gradients synchronise every ``num_steps`` batches and, with ``sync_with_dataloader``,
    always on the last batch of a data loader (so an epoch never ends mid-accumulation).
    Both counters are saved in checkpoints (:meth:`counters`, :meth:`restore`).
    """

    gradient_state: GradientState
    precision: Precision
    strategy: Strategy
    preparer: Preparer  # unscaling reaches every prepared optimizer
    step: int = dataclasses.field(default=0, init=False)  # batches seen through accumulate()
    position: int = dataclasses.field(default=0, init=False)  # into the accumulation cycle

    # -- counting ------------------------------------------------------------------------------
    def _advance(self) -> bool:
        """Account for one more batch; returns whether this batch synchronises."""
        state = self.gradient_state
        if state.sync_with_dataloader and state.end_of_dataloader:
            self.position = 0
            sync = True
        else:
            self.position += 1
            sync = self.position % state.num_steps == 0
        state._set_sync_gradients(sync)
        return sync

    @contextlib.contextmanager
    def accumulate(self, *models: nn.Module) -> Iterator[None]:
        """Context for one batch under gradient accumulation: gradients synchronise (and the
        optimizer steps) every ``gradient_accumulation_steps`` batches and on the last batch."""
        sync = self._advance()
        self.step += 1
        with contextlib.ExitStack() as stack:
            if not sync and not self.gradient_state.sync_each_batch:
                for model in models:
                    stack.enter_context(self.strategy.no_sync(model))
            yield

    def counters(self) -> dict[str, int]:
        """What a checkpoint records of the counting."""
        return {"step": self.step, "accumulation_step": self.position}

    def restore(self, counters: dict[str, int]) -> None:
        """Continue counting where a checkpoint's :meth:`counters` left off."""
        self.step = counters.get("step", self.step)
        self.position = counters.get("accumulation_step", self.position)

    def reset(self) -> None:
        """Start counting afresh (after ``free_memory``)."""
        self.step = 0
        self.position = 0
        self.gradient_state._set_sync_gradients(True)

    # -- gradients -----------------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward()``, divided for accumulation and scaled under fp16. Under
        DeepSpeed: the engine's backward, and on a synchronising batch its step."""
        if isinstance(self.strategy, DeepSpeedStrategy):
            self.strategy.backward(loss, self.gradient_state.sync_gradients, **kwargs)
            return
        loss = loss / self.gradient_state.num_steps
        scaler = self.precision.scaler
        if scaler is not None:
            scaler.scale(loss).backward(**kwargs)
        else:
            loss.backward(**kwargs)

    def unscale_gradients(self, optimizer: Any = None) -> None:
        """Unscale fp16 gradients of ``optimizer`` (all prepared ones when None)."""
        if self.precision.scaler is None or not self.gradient_state.sync_gradients:
            return
        for opt in [optimizer] if optimizer is not None else self.preparer.optimizers:
            opt.unscale_gradients()

    def clip_grad_norm_(
        self, parameters: Any, max_norm: float, norm_type: float = 2
    ) -> torch.Tensor:
        """Clip the gradients' total norm (after unscaling fp16 gradients); returns the norm."""
        self.unscale_gradients()
        return self.strategy.clip_grad_norm_(parameters, max_norm, norm_type)

    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        """Clip every gradient value to ``[-clip_value, clip_value]`` (after unscaling)."""
        if isinstance(self.strategy, DeepSpeedStrategy):
            raise NotImplementedError(
                "clip_grad_value_ under DeepSpeed: DeepSpeed clips by the gradients' total norm "
                "only; use DeepSpeedPlugin(gradient_clipping=...) or clip_grad_norm_."
            )
        self.unscale_gradients()
        torch.nn.utils.clip_grad_value_(parameters, clip_value)
