"""The Accelerator's methods across processes: collectives (its ``Collectives`` part), the
early-stop trigger (``Trigger``) and joining uneven inputs (``UnevenInputs``).

Each is written out with the part's signature, takes the part's docstring through
``documented_by`` and calls the part, which is declared here with its type, so mypy checks
every call against the part's class.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from .collectives import Collectives
from .documented import documented_by
from .uneven import Trigger, UnevenInputs

__all__ = ["CollectiveMethods"]


class CollectiveMethods:
    """Base of ``Accelerator``: what it passes on to ``self._collectives``, ``self._trigger``
    and ``self._uneven``."""

    _collectives: Collectives
    _trigger: Trigger
    _uneven: UnevenInputs

    # -- collectives ---------------------------------------------------------------------------
    @documented_by(Collectives.gather)
    def gather(self, tensor: Any) -> Any:
        return self._collectives.gather(tensor)

    @documented_by(Collectives.gather_for_metrics)
    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        return self._collectives.gather_for_metrics(input_data, use_gather_object)

    @documented_by(Collectives.reduce)
    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        return self._collectives.reduce(tensor, reduction, scale)

    @documented_by(Collectives.pad_across_processes)
    def pad_across_processes(
        self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False
    ) -> Any:
        return self._collectives.pad_across_processes(tensor, dim, pad_index, pad_first)

    # -- the trigger ---------------------------------------------------------------------------
    @documented_by(Trigger.set_trigger)
    def set_trigger(self) -> None:
        self._trigger.set_trigger()

    @documented_by(Trigger.check_trigger)
    def check_trigger(self) -> bool:
        return self._trigger.check_trigger()

    @property
    def flag_tensor(self) -> torch.Tensor | None:
        """The trigger's flag."""
        return self._trigger.flag_tensor

    # -- uneven inputs -------------------------------------------------------------------------
    @documented_by(UnevenInputs.join_uneven_inputs)
    def join_uneven_inputs(
        self, joinables: Any, even_batches: bool | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        return self._uneven.join_uneven_inputs(joinables, even_batches)
