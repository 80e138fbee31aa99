"""The Accelerator's collective operations: :mod:`nbaccel.ops`, plus ``gather_for_metrics``,
which knows where the data loader's last batch was padded."""

from __future__ import annotations

from typing import Any

from .. import ops
from ..state import GradientState

__all__ = ["Collectives"]


class Collectives:
    """``gather``, ``gather_for_metrics``, ``reduce`` and ``pad_across_processes``."""

    def __init__(self, gradient_state: GradientState) -> None:
        self.gradient_state = gradient_state

    def gather(self, tensor: Any) -> Any:
        """Gather (nested) tensors from every process, concatenated along dim 0."""
        return ops.gather(tensor)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """Gather for evaluation: drops the samples duplicated to even out the last batch, so
        exactly the data set's samples come back, in order."""
        objects = use_gather_object or not ops.has_only_tensors(input_data)
        data = ops.gather_object(input_data) if objects else ops.gather(input_data)
        state = self.gradient_state
        if state.end_of_dataloader and state.remainder > 0:
            return ops.truncate(data, state.remainder)
        return data

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """Reduce (nested) tensors across processes (``sum``, ``mean`` or ``none``)."""
        return ops.reduce(tensor, reduction=reduction, scale=scale)

    def pad_across_processes(
        self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False
    ) -> Any:
        """Pad (nested) tensors to the largest size along ``dim`` across processes."""
        return ops.pad_across_processes(tensor, dim=dim, pad_index=pad_index, pad_first=pad_first)
