"""WorkerSpec: the one typed hand-off from the launcher to a worker process."""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import cloudpickle

from .wire import dumps_for_worker

__all__ = ["WorkerMode", "WorkerSpec"]


class WorkerMode(Enum):
    """What a worker runs: a launch's one function, or a pool's tasks read from a pipe."""

    LAUNCH = "launch"
    POOL = "pool"


def _nothing() -> None:
    """The function of a pool worker's spec: its tasks come through its task pipe."""


@dataclass
class WorkerSpec:
    """Everything one worker needs; serialised with cloudpickle for spawned workers.

    Attributes:
        rank: global rank of the worker.
        local_rank: index of the worker on this machine.
        env: environment variables the worker sets before anything else.
        stdout_fd: write end of the worker's stdout pipe.
        stderr_fd: write end of the worker's stderr pipe.
        message_fd: write end of the worker's message pipe to the launcher (set when it
            starts; ``protocol.py`` says what travels there).
        start_method: ``"fork"`` or ``"spawn"``.
        parent_pid: pid of the launcher; the worker exits when it goes away.
        num_threads: torch intra-op threads for the worker (None: leave torch's default).
        sys_path: the launcher's ``sys.path``, so functions from the user's modules import.
        cwd: the launcher's working directory.
        display: the launcher draws rich output in a notebook: send it (see ``display.py``).
        mode: a launch's worker runs ``function`` as its one task (task 0); a pool's runs the
            tasks it reads from ``task_fd`` until told to stop.
        function: a launch's function (a notebook-defined function, lambda or closure works:
            fork inherits it, spawn ships it by value with cloudpickle).
        args: positional arguments for ``function``.
        kwargs: keyword arguments for ``function``.
        task_fd: the read end of the worker's task pipe from the launcher: a pool's tasks,
            and every worker's "where are you?" (-1: none, a rank another host started).
    """

    rank: int
    local_rank: int
    env: dict[str, str]
    stdout_fd: int
    stderr_fd: int
    start_method: str
    parent_pid: int
    num_threads: int | None = None
    sys_path: list[str] = field(default_factory=list)
    cwd: str = ""
    display: bool = False
    mode: WorkerMode = WorkerMode.LAUNCH
    function: Callable[..., Any] = _nothing
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    task_fd: int = -1
    message_fd: int = -1

    def dumps(self) -> bytes:
        """Serialise for a spawned worker (functions defined in the notebook go by value)."""
        try:
            inner = dumps_for_worker(self)
        except Exception as exc:
            raise TypeError(
                "start_method='spawn' must send the function and its arguments to new "
                f"processes, but they could not be pickled: {type(exc).__name__}: {exc}. "
                "Use start_method='fork', or pass arguments that can be pickled."
            ) from exc
        header = {
            "sys_path": self.sys_path,
            "cwd": self.cwd,
            "rank": self.rank,
            "fds": (self.stdout_fd, self.stderr_fd, self.message_fd),
        }
        return pickle.dumps((header, inner))

    @staticmethod
    def header(data: bytes) -> dict[str, Any]:
        """The plain part of :meth:`dumps`'s output: rank, descriptors, ``sys.path``, cwd."""
        header, _ = pickle.loads(data)
        return dict(header)

    @staticmethod
    def loads(data: bytes) -> WorkerSpec:
        """Inverse of :meth:`dumps`: restores ``sys.path`` and the working directory first, so
        that functions from the user's own modules can be imported while unpickling."""
        header, inner = pickle.loads(data)
        sys_path, cwd = header["sys_path"], header["cwd"]
        sys.path[:] = list(sys_path) + [p for p in sys.path if p not in sys_path]
        if cwd:
            os.chdir(cwd)
        spec = cloudpickle.loads(inner)
        if not isinstance(spec, WorkerSpec):
            raise TypeError(f"expected a WorkerSpec, got {type(spec).__name__}")
        return spec
