"""The Accelerator's methods and properties that its process-wide ``AcceleratorState`` answers:
where this process sits in the job, and the process-control helpers.

Each is written out with the state's signature and calls ``self.state``, which is declared
here with its type, so mypy checks every call against ``AcceleratorState``. The methods take
the state's docstrings through ``documented_by``; most properties keep shorter ones of their
own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from ..enums import DistributedType
from ..state import AcceleratorState
from .documented import documented_by

__all__ = ["StateMethods"]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class StateMethods:
    """Base of ``Accelerator``: what it passes on to ``self.state``."""

    state: AcceleratorState

    # -- where this process sits ---------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """The device of this process."""
        return self.state.device

    @property
    def distributed_type(self) -> DistributedType:
        """The setup."""
        return self.state.distributed_type

    @property
    def num_processes(self) -> int:
        """Processes in the job."""
        return self.state.num_processes

    @property
    def process_index(self) -> int:
        """This process's index."""
        return self.state.process_index

    @property
    @documented_by(AcceleratorState.local_process_index)
    def local_process_index(self) -> int:
        return self.state.local_process_index

    @property
    def is_main_process(self) -> bool:
        """Index 0."""
        return self.state.is_main_process

    @property
    def is_local_main_process(self) -> bool:
        """First process of its machine."""
        return self.state.is_local_main_process

    @property
    def is_last_process(self) -> bool:
        """Highest index."""
        return self.state.is_last_process

    @property
    def mixed_precision(self) -> str:
        """The precision."""
        return self.state.mixed_precision

    @property
    def use_distributed(self) -> bool:
        """Several processes."""
        return self.state.use_distributed

    @property
    def deepspeed_plugin(self) -> Any:
        """The selected one."""
        return self.state.deepspeed_plugin

    # -- process control -----------------------------------------------------------------------
    @documented_by(AcceleratorState.print)
    def print(self, *args: Any, **kwargs: Any) -> None:
        self.state.print(*args, **kwargs)

    @documented_by(AcceleratorState.wait_for_everyone)
    def wait_for_everyone(self) -> None:
        self.state.wait_for_everyone()

    @documented_by(AcceleratorState.main_process_first)
    def main_process_first(self) -> contextlib.AbstractContextManager[None]:
        return self.state.main_process_first()

    @documented_by(AcceleratorState.local_main_process_first)
    def local_main_process_first(self) -> contextlib.AbstractContextManager[None]:
        return self.state.local_main_process_first()

    @documented_by(AcceleratorState.split_between_processes)
    def split_between_processes(
        self, inputs: T, apply_padding: bool = False
    ) -> contextlib.AbstractContextManager[T]:
        return self.state.split_between_processes(inputs, apply_padding)

    @documented_by(AcceleratorState.on_main_process)
    def on_main_process(self, function: Any = None) -> Any:
        return self.state.on_main_process(function)

    @documented_by(AcceleratorState.on_local_main_process)
    def on_local_main_process(self, function: Any = None) -> Any:
        return self.state.on_local_main_process(function)

    @documented_by(AcceleratorState.on_last_process)
    def on_last_process(self, function: F) -> F:
        return self.state.on_last_process(function)

    @documented_by(AcceleratorState.on_process)
    def on_process(self, function: Any = None, process_index: Any = None) -> Any:
        return self.state.on_process(function, process_index)

    @documented_by(AcceleratorState.on_local_process)
    def on_local_process(self, function: Any = None, local_process_index: Any = None) -> Any:
        return self.state.on_local_process(function, local_process_index)
