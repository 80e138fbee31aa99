"""The prepared optimizer and scheduler: step only when gradients synchronise, skip on inf."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .state import GradientState

__all__ = ["AcceleratedOptimizer", "AcceleratedScheduler"]


def _move_state(state: dict[str, Any], device: torch.device) -> dict[str, Any]:
    def move(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.to(device)
        if isinstance(value, dict):
            return {k: move(v) for k, v in value.items()}
        if isinstance(value, list):
            return [move(v) for v in value]
        return value

    return {**state, "state": move(state.get("state", {}))}


def _forward(wrapper: Any, field: str, name: str) -> Any:
    """``name`` of the wrapped object; AttributeError while it is not there yet (unpickling)."""
    try:
        wrapped = wrapper.__dict__[field]
    except KeyError:
        raise AttributeError(name) from None
    return getattr(wrapped, name)


@dataclass(eq=False, repr=False)
class AcceleratedOptimizer(torch.optim.Optimizer):
    """Wraps a user's optimizer: steps only on gradient-synchronising steps, through the fp16
    scaler when there is one, and records whether the scaler skipped the step.

    Args:
        optimizer: the user's optimizer.
        device_placement: move loaded state to ``device``.
        scaler: the fp16 ``GradScaler``, or None.
        device: the device the model lives on.
        gradient_reducer: called with the wrapped optimizer before each real step when the
            model wrapper does not reduce gradients itself (XLA).
    """

    optimizer: torch.optim.Optimizer
    device_placement: bool = True
    scaler: torch.amp.GradScaler | None = None
    device: torch.device | None = None
    gradient_reducer: Callable[[torch.optim.Optimizer], None] | None = None
    gradient_state: GradientState = field(default_factory=GradientState, init=False)
    # Accelerate's name: the fp16 scaler skipped the last step
    _is_overflow: bool = field(default=False, init=False)
    _unscaled: bool = field(default=False, init=False)

    @property
    def step_was_skipped(self) -> bool:
        """Whether the last step was skipped (fp16 gradients with inf / nan)."""
        return self._is_overflow

    @step_was_skipped.setter
    def step_was_skipped(self, skipped: bool) -> None:
        self._is_overflow = bool(skipped)

    # the wrapper shares the wrapped optimizer's attributes
    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, groups: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = groups

    @property
    def defaults(self) -> dict[str, Any]:  # type: ignore[override]
        return self.optimizer.defaults

    @property
    def state(self) -> Any:  # type: ignore[override]
        return self.optimizer.state

    def __getattr__(self, name: str) -> Any:
        return _forward(self, "optimizer", name)

    def __getstate__(self) -> dict[str, Any]:
        """Everything the wrapper holds (torch's Optimizer would keep only its own fields)."""
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.device_placement and self.device is not None:
            state_dict = _move_state(state_dict, self.device)
        self.optimizer.load_state_dict(state_dict)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear gradients, except while gradients are being accumulated."""
        if self.gradient_state.sync_gradients:
            self.optimizer.zero_grad(set_to_none=set_to_none)

    def unscale_gradients(self) -> None:
        """Divide the gradients by the fp16 loss scale (once per step)."""
        if self.scaler is not None and not self._unscaled:
            self.scaler.unscale_(self.optimizer)
            self._unscaled = True

    def step(self, closure: Any = None) -> Any:
        """Update the parameters on synchronising steps; accumulate otherwise."""
        if not self.gradient_state.sync_gradients:
            return None
        result = None
        if self.gradient_reducer is not None:
            self.gradient_reducer(self.optimizer)
        if self.scaler is not None:
            scale = self.scaler.get_scale()
            if closure is not None:
                self.scaler.step(self.optimizer, closure)
            else:
                self.scaler.step(self.optimizer)
            self.scaler.update()
            self.step_was_skipped = self.scaler.get_scale() < scale
        else:
            result = self.optimizer.step(closure) if closure else self.optimizer.step()
            self._is_overflow = False  # Accelerate's name: the fp16 scaler skipped the last step
        self._unscaled = False
        self._clear_autocast_cache()
        return result

    def _clear_autocast_cache(self) -> None:
        """Inside an autocast block torch caches half-precision copies of the weights until
        the outermost block exits; after the weights change those copies are stale."""
        device_type = self.device.type if self.device is not None else "cpu"
        with contextlib.suppress(RuntimeError, TypeError):
            if torch.is_autocast_enabled(device_type):
                torch.clear_autocast_cache()

    def train(self) -> None:
        """Forward ``train()`` to optimizers that have it (schedule-free optimizers)."""
        if hasattr(self.optimizer, "train"):
            self.optimizer.train()

    def eval(self) -> None:
        """Forward ``eval()`` to optimizers that have it."""
        if hasattr(self.optimizer, "eval"):
            self.optimizer.eval()

    def __repr__(self) -> str:
        return f"AcceleratedOptimizer({self.optimizer!r})"


@dataclass(eq=False, repr=False)
class AcceleratedScheduler:
    """Wraps a learning-rate scheduler so that it steps with the optimizer.

    It does not step while gradients accumulate or when the fp16 scaler skipped the optimizer
    step; without ``split_batches`` it steps once per process on each optimizer step, since
    each process consumed one batch (as Accelerate does).

    Args:
        scheduler: the user's scheduler.
        optimizers: the prepared optimizers it follows.
        step_with_optimizer: False steps the scheduler on every call, unconditionally.
        split_batches: batches are split across processes rather than one per process.
        num_processes: processes in the job.
    """

    scheduler: Any
    optimizers: list[AcceleratedOptimizer]
    step_with_optimizer: bool = True
    split_batches: bool = False
    num_processes: int = 1
    gradient_state: GradientState = field(default_factory=GradientState, init=False)

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Step the wrapped scheduler when the optimizer really stepped."""
        if not self.step_with_optimizer:
            self.scheduler.step(*args, **kwargs)
            return
        if not self.gradient_state.sync_gradients:
            if self.gradient_state.adjust_scheduler:
                self.scheduler._step_count += 1
            return
        if any(opt.step_was_skipped for opt in self.optimizers):
            return
        for _ in range(1 if self.split_batches else self.num_processes):
            total = getattr(self.scheduler, "total_steps", None)
            if total is None or self.scheduler._step_count <= total:
                self.scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[float]:
        return list(self.scheduler.get_last_lr())

    def state_dict(self) -> dict[str, Any]:
        return dict(self.scheduler.state_dict())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state_dict)

    def get_lr(self) -> Any:
        return self.scheduler.get_lr()

    def __getattr__(self, name: str) -> Any:
        return _forward(self, "scheduler", name)
