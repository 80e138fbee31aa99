"""The process-control helpers of the Accelerator, delegated to its ``state``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .state import AcceleratorState

__all__ = ["ProcessControlMixin"]

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

    def on_main_process(self, function: Callable[..., Any]) -> Any:
        """Decorator: run on the main process only."""
        return self.state.on_main_process(function)

    def on_local_main_process(self, function: Callable[..., Any]) -> Any:
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
