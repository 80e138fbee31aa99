"""``DummyOptim`` and ``DummyScheduler``: stand-ins given to ``prepare()`` when the DeepSpeed
config names its own optimizer and scheduler; ``prepare()`` hands back DeepSpeed's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["DummyOptim", "DummyScheduler"]


class _StandIn:
    """What both stand-ins keep: the keyword arguments they do not name, as Accelerate keeps
    them (in ``kwargs``)."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


class DummyOptim(_StandIn):
    """The parameters to train and the learning rate for the config's ``"optimizer"``.

    Args:
        params: the model's parameters (or parameter groups).
        lr: fills ``optimizer.params.lr`` when the config says ``"auto"``.
        weight_decay: fills ``optimizer.params.weight_decay`` when ``"auto"``.
    """

    def __init__(
        self, params: Any, lr: float = 0.001, weight_decay: float = 0, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.params = params
        self.lr = lr
        self.weight_decay = weight_decay


class DummyScheduler(_StandIn):
    """The warm-up for the config's ``"scheduler"``, or a function that builds a scheduler
    from DeepSpeed's optimizer (``lr_scheduler_callable``).

    Args:
        optimizer: the :class:`DummyOptim`.
        total_num_steps: fills ``scheduler.params.total_num_steps`` (divided by the number of
            processes unless the batches are split).
        warmup_num_steps: fills ``scheduler.params.warmup_num_steps`` (at least 1).
        lr_scheduler_callable: ``callable(optimizer) -> scheduler``, used when the config has
            no ``"scheduler"``.
    """

    def __init__(
        self,
        optimizer: Any,
        total_num_steps: int | None = None,
        warmup_num_steps: int = 0,
        lr_scheduler_callable: Callable[[Any], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.optimizer = optimizer
        self.total_num_steps = total_num_steps
        self.warmup_num_steps = warmup_num_steps
        self.lr_scheduler_callable = lr_scheduler_callable
