"""The Accelerator's process-control helpers and collective operations, delegated to its
``state`` and to :mod:`nbaccel.ops`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from . import ops
from .state import AcceleratorState, GradientState, PartialState

__all__ = ["CollectivesMixin", "ProcessControlMixin", "tqdm", "wait_for_everyone"]

T = TypeVar("T")


class ProcessControlMixin:
    """``print``, barriers, ``main_process_first``, splitting and the process decorators."""

    state: AcceleratorState

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` once per machine."""
        self.state.print(*args, **kwargs)

    def wait_for_everyone(self) -> None:
        """Block until every process gets here."""
        self.state.wait_for_everyone()

    def main_process_first(self) -> Any:
        """Context: the main process runs the block first."""
        return self.state.main_process_first()

    def local_main_process_first(self) -> Any:
        """Context: each machine's first process runs the block first."""
        return self.state.local_main_process_first()

    def split_between_processes(self, inputs: T, apply_padding: bool = False) -> Any:
        """Context: this process's share of ``inputs``."""
        return self.state.split_between_processes(inputs, apply_padding=apply_padding)

    def on_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: run on the main process only."""
        return self.state.on_main_process(function)

    def on_local_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: run on each machine's first process only."""
        return self.state.on_local_main_process(function)

    def on_last_process(self, function: Callable[..., Any]) -> Any:
        """Decorator: run on the last process only."""
        return self.state.on_last_process(function)

    def on_process(self, function: Any = None, process_index: Any = None) -> Any:
        """Decorator: run on the process with this global index only."""
        return self.state.on_process(function, process_index=process_index)

    def on_local_process(self, function: Any = None, local_process_index: Any = None) -> Any:
        """Decorator: run on the process with this index on each machine only."""
        return self.state.on_local_process(function, local_process_index=local_process_index)


class CollectivesMixin:
    """``gather``, ``gather_for_metrics``, ``reduce`` and ``pad_across_processes``."""

    gradient_state: GradientState

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


def wait_for_everyone() -> None:
    """Block until every process of the job gets here (``PartialState().wait_for_everyone()``)."""
    PartialState().wait_for_everyone()


def tqdm(*args: Any, main_process_only: bool = True, **kwargs: Any) -> Any:
    """``tqdm.auto.tqdm``, shown on each machine's first process only (every process with
    ``main_process_only=False``)."""
    from tqdm.auto import tqdm as _tqdm

    if args and isinstance(args[0], bool):
        raise ValueError(
            "Passing True or False as the first argument of tqdm is not supported; use the "
            "main_process_only keyword argument."
        )
    disable = kwargs.pop("disable", False)
    if main_process_only and not disable:
        disable = PartialState().local_process_index != 0
    return _tqdm(*args, **kwargs, disable=disable)
