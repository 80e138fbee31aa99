"""PartialState: where this process sits in the job, and helpers for process control."""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import torch
import torch.distributed as dist

from ..enums import DistributedType
from ..environment import read_launch_environment
from ..splitting import split_for_process
from ..validation import is_int
from .handshake import enter
from .registry import (
    STATE,
    ProcessRecord,
    build_process_record,
    current_process,
    process_group_kwargs,
    reset_registry,
)
from .shared import SharedStateView, missing_attribute, record_property

__all__ = ["PartialState", "ProcessView"]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def _check_index(name: str, value: Any, limit: int, what: str) -> int:
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r}).")
    if not 0 <= value < limit:
        raise ValueError(
            f"{name}={value} is out of range: this job has {limit} {what} (0..{limit - 1})."
        )
    return value


def process_items(record: ProcessRecord) -> dict[str, Any]:
    """The process record under the names Accelerate's ``PartialState._shared_state`` uses."""
    return {
        "_cpu": record.cpu,
        "backend": record.backend,
        "debug": record.launch.debug,
        "device": record.device,
        "distributed_type": record.distributed_type,
        "fork_launched": record.launch.fork_launched,
        "local_process_index": record.local_process_index,
        "num_processes": record.num_processes,
        "process_index": record.process_index,
    }


class ProcessView:
    """Attributes and process-control helpers shared by PartialState and AcceleratorState."""

    def _process(self) -> ProcessRecord:
        """The process record this view reads (an ``AttributeError`` once it was reset)."""
        return current_process()

    def _was_reset(self) -> bool:
        return STATE.process is None

    if not TYPE_CHECKING:  # keep attribute checking for type checkers

        def __getattr__(self, name: str) -> Any:
            # Only reached when normal lookup failed: a property read after a reset, or a typo.
            missing_attribute(self, name, reset=self._was_reset())

    # -- documented attributes ---------------------------------------------------------------
    @property
    def initialized(self) -> bool:
        """True once the process state has been set up."""
        return STATE.process is not None

    device: torch.device = record_property(
        "_process", "device", "The device this process computes on."
    )

    @property
    def default_device(self) -> torch.device:
        """Alias of :attr:`device`."""
        return self.device

    backend: str | None = record_property(
        "_process",
        "backend",
        "The process-group backend (``gloo``, ``nccl``, ``xla``) or None on one process.",
    )

    @property
    def distributed_type(self) -> DistributedType:
        """The kind of distributed setup in use."""
        acc = STATE.accelerator
        if acc is not None and acc.fsdp_plugin is not None:
            return DistributedType.FSDP
        if acc is not None and acc.deepspeed_plugins:
            return DistributedType.DEEPSPEED
        return self._process().distributed_type

    num_processes: int = record_property(
        "_process", "num_processes", "Number of processes in the job."
    )

    process_index: int = record_property(
        "_process", "process_index", "Global index of this process."
    )

    local_process_index: int = record_property(
        "_process", "local_process_index", "Index of this process on its machine."
    )

    local_num_processes: int = record_property(
        "_process", "local_num_processes", "Number of processes on this machine."
    )

    @property
    def is_main_process(self) -> bool:
        """True on the process with index 0."""
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        """True on the first process of each machine."""
        return self.local_process_index == 0

    @property
    def is_last_process(self) -> bool:
        """True on the process with the highest index."""
        return self.process_index == self.num_processes - 1

    @property
    def use_distributed(self) -> bool:
        """True when more than one process takes part."""
        return self.num_processes > 1

    @property
    def mixed_precision(self) -> str:
        """``"no"``, ``"fp16"``, ``"bf16"`` or ``"fp8"``."""
        acc = STATE.accelerator
        if acc is not None:
            return acc.mixed_precision
        return self._process().launch.mixed_precision or "no"

    @property
    def debug(self) -> bool:
        """True when debug mode is on (``NBACCEL_DEBUG_MODE=1``). Settable for the whole
        process, as in Accelerate, whose tests turn it on around checks of the collectives
        (nbaccel checks the collectives' inputs whatever it says)."""
        return self._process().launch.debug

    @debug.setter
    def debug(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"{type(self).__name__}.debug must be True or False, got {value!r}.")
        record = self._process()
        record.launch = dataclasses.replace(record.launch, debug=value)

    fork_launched: bool = record_property(
        "_process", "launch.fork_launched", "True in a worker forked by the notebook launcher."
    )

    restart_count: int = record_property(
        "_process",
        "launch.restart_count",
        "How many times the group was restarted before this attempt (0 on the first).",
    )

    # -- synchronisation ---------------------------------------------------------------------
    def wait_for_everyone(self) -> None:
        """Block until every process reaches this point (no-op on one process)."""
        kind = self._process().distributed_type
        if kind == DistributedType.XLA:
            # torch_xla is installed on TPU hosts only
            import torch_xla.core.xla_model as xm

            xm.rendezvous("nbaccel.wait_for_everyone")
        elif kind != DistributedType.NO and dist.is_initialized():
            enter("wait_for_everyone")  # a barrier that fails at once if others are elsewhere

    @contextlib.contextmanager
    def _goes_first(self, first: bool) -> Iterator[None]:
        if not first:
            self.wait_for_everyone()
        yield
        if first:
            self.wait_for_everyone()

    def main_process_first(self) -> contextlib.AbstractContextManager[None]:
        """Context manager: the main process runs the block before all others."""
        return self._goes_first(self.is_main_process)

    def local_main_process_first(self) -> contextlib.AbstractContextManager[None]:
        """Context manager: each machine's first process runs the block before the others."""
        return self._goes_first(self.is_local_main_process)

    @contextlib.contextmanager
    def split_between_processes(self, inputs: T, apply_padding: bool = False) -> Iterator[T]:
        """Yield this process's share of ``inputs`` (list, tuple, dict or tensor).

        With ``apply_padding`` every share has the same length (the last element repeats),
        which ``gather`` needs.
        """
        if not isinstance(apply_padding, bool):
            raise TypeError("split_between_processes(apply_padding=...) must be True or False.")
        yield split_for_process(inputs, self.num_processes, self.process_index, apply_padding)

    # -- decorators --------------------------------------------------------------------------
    def _only_when(self, condition: Callable[[], bool], function: F) -> F:
        if not callable(function):
            raise TypeError(f"expected a function to decorate, got {type(function).__name__}.")

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs) if condition() else None

        return wrapper  # type: ignore[return-value]

    def on_main_process(self, function: Any = None) -> Any:
        """Decorator: run ``function`` on the main process only."""
        return self._only_when(lambda: self.is_main_process, function)

    def on_local_main_process(self, function: Any = None) -> Any:
        """Decorator: run ``function`` on the first process of each machine only."""
        return self._only_when(lambda: self.is_local_main_process, function)

    def on_last_process(self, function: F) -> F:
        """Decorator: run ``function`` on the last process only."""
        return self._only_when(lambda: self.is_last_process, function)

    def on_process(self, function: Any = None, process_index: Any = None) -> Any:
        """Decorator: run ``function`` on the process with global index ``process_index``."""
        if process_index is None:
            raise TypeError(
                "on_process needs process_index=, e.g. @state.on_process(process_index=1)."
            )
        index = _check_index(
            "on_process(process_index)", process_index, self.num_processes, "processes"
        )
        if function is None:
            return functools.partial(self.on_process, process_index=index)
        return self._only_when(lambda: self.process_index == index, function)

    def on_local_process(self, function: Any = None, local_process_index: Any = None) -> Any:
        """Decorator: run ``function`` on the process with this index on each machine."""
        if local_process_index is None:
            raise TypeError(
                "on_local_process needs local_process_index=, "
                "e.g. @state.on_local_process(local_process_index=0)."
            )
        index = _check_index(
            "on_local_process(local_process_index)",
            local_process_index,
            self.local_num_processes,
            "processes on this machine",
        )
        if function is None:
            return functools.partial(self.on_local_process, local_process_index=index)
        return self._only_when(lambda: self.local_process_index == index, function)

    # -- misc --------------------------------------------------------------------------------
    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the first process of each machine only."""
        if self.is_local_main_process:
            builtins.print(*args, **kwargs)

    def set_device(self) -> None:
        """Make :attr:`device` the current device of its kind (initialises CUDA on GPUs)."""
        device = self.device
        if device.type == "cuda":
            torch.cuda.set_device(device)

    def destroy_process_group(self, group: Any = None) -> None:
        """Destroy ``group`` (the default group when None).

        In a worker forked by the notebook launcher the default group belongs to the launcher,
        which tears it down after the function returns; then this call does nothing. As in
        Accelerate, it also works once the state was reset (scripts end with it after tests
        that reset the state): it reads only how this process was launched.
        """
        record = STATE.process
        launch = record.launch if record is not None else read_launch_environment()
        if group is None and launch.fork_launched:
            return
        if dist.is_initialized():
            dist.destroy_process_group(group)

    def __repr__(self) -> str:
        return (
            f"Distributed environment: {self.distributed_type}  Backend: {self.backend}\n"
            f"Num processes: {self.num_processes}\n"
            f"Process index: {self.process_index}\n"
            f"Local process index: {self.local_process_index}\n"
            f"Device: {self.device}\n"
            f"Mixed precision type: {self.mixed_precision}\n"
        )


class PartialState(ProcessView):
    """Where this process sits in the job, and helpers for process control.

    Args:
        cpu: run on the CPU even when an accelerator is present.
        **kwargs: passed to ``torch.distributed.init_process_group`` (``backend``,
            ``init_method``, ``timeout``); see :class:`InitProcessGroupKwargs`.
    """

    def __init__(self, cpu: bool = False, **kwargs: Any) -> None:
        if not isinstance(cpu, bool):
            raise TypeError(f"PartialState(cpu=...) must be True or False, got {cpu!r}.")
        if STATE.process is None:
            STATE.process = build_process_record(cpu, dict(kwargs))
        else:
            process_group_kwargs(dict(kwargs))  # still reject bad arguments
            if cpu and not STATE.process.cpu:
                raise ValueError(
                    "PartialState(cpu=True) was asked for, but this process's state was already "
                    f"set up on {STATE.process.device}. Create the first PartialState or "
                    "Accelerator with cpu=True (or restart the kernel)."
                )

    _shared_state = SharedStateView(
        "PartialState", lambda: STATE.process, process_items, reset_registry
    )

    @staticmethod
    def _reset_state() -> None:
        """Forget the process state (Accelerate's spelling of ``nbaccel.testing.reset_state``);
        state objects created before then raise ``AttributeError`` when read."""
        reset_registry()
