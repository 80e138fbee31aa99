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

__all__ = ["WorkerMode", "WorkerPipes", "WorkerSpec", "merge_sys_path"]


class WorkerMode(Enum):
    """What a worker runs: a launch's one function, or a pool's tasks read from a pipe."""

    LAUNCH = "launch"
    POOL = "pool"


def _nothing() -> None:
    """The function of a pool worker's spec: its tasks come through its task pipe."""


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker runs: the same wherever it runs (it travels to other hosts as it is);
    serialised with cloudpickle for spawned workers. The descriptors it runs with on the
    machine that starts it are :class:`WorkerPipes`.

    Attributes:
        rank: global rank of the worker.
        local_rank: index of the worker on its machine.
        env: environment variables the worker sets before anything else.
        start_method: ``"fork"`` or ``"spawn"``.
        num_threads: torch intra-op threads for the worker (None: leave torch's default).
        sys_path: the launcher's ``sys.path``, so functions from the user's modules import.
        cwd: the launcher's working directory.
        display: the launcher draws rich output in a notebook: send it (see ``display.py``).
        mode: a launch's worker runs ``function`` as its one task (task 0); a pool's runs the
            tasks it reads from its task pipe until told to stop.
        function: a launch's function (a notebook-defined function, lambda or closure works:
            fork inherits it, spawn ships it by value with cloudpickle).
        args: positional arguments for ``function``.
        kwargs: keyword arguments for ``function``.
    """

    rank: int
    local_rank: int
    env: dict[str, str]
    start_method: str
    num_threads: int | None = None
    sys_path: list[str] = field(default_factory=list)
    cwd: str = ""
    display: bool = False
    mode: WorkerMode = WorkerMode.LAUNCH
    function: Callable[..., Any] = _nothing
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def dumps(self, pipes: WorkerPipes) -> bytes:
        """Serialise for a spawned worker, with its descriptors (functions defined in the
        notebook go by value)."""
        try:
            inner = dumps_for_worker((self, pipes))
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
            "fds": (pipes.stdout_fd, pipes.stderr_fd, pipes.message_fd),
        }
        return pickle.dumps((header, inner))

    @staticmethod
    def header(data: bytes) -> dict[str, Any]:
        """The plain part of :meth:`dumps`'s output: rank, descriptors, ``sys.path``, cwd."""
        header, _ = pickle.loads(data)
        return dict(header)

    @staticmethod
    def loads(data: bytes) -> tuple[WorkerSpec, WorkerPipes]:
        """Inverse of :meth:`dumps`: restores ``sys.path`` and the working directory first, so
        that functions from the user's own modules can be imported while unpickling."""
        header, inner = pickle.loads(data)
        sys_path, cwd = header["sys_path"], header["cwd"]
        merge_sys_path(sys_path)
        if cwd:
            os.chdir(cwd)
        spec, pipes = cloudpickle.loads(inner)
        if not isinstance(spec, WorkerSpec) or not isinstance(pipes, WorkerPipes):
            raise TypeError(f"expected a WorkerSpec, got {type(spec).__name__}")
        return spec, pipes


@dataclass(frozen=True)
class WorkerPipes:
    """One worker's descriptors on the machine that starts it (they mean nothing elsewhere).

    Attributes:
        stdout_fd: write end of the worker's stdout pipe.
        stderr_fd: write end of the worker's stderr pipe.
        parent_pid: pid of its launcher there (the notebook, or a host's agent); the worker
            exits when it goes away.
        task_fd: the read end of the worker's task pipe: a pool's tasks, and every worker's
            "where are you?" (-1: none; then nobody can ask it).
        message_fd: write end of the worker's message pipe to the launcher (set when it
            starts; ``protocol.py`` says what travels there).
        note_fd: the page where the worker notes the collective it enters
            (``launch/notes.py``; -1: none).
    """

    stdout_fd: int
    stderr_fd: int
    parent_pid: int
    task_fd: int = -1
    message_fd: int = -1
    note_fd: int = -1

    @property
    def child_ends(self) -> tuple[int, ...]:
        """The worker's own ends, which no other worker may keep."""
        ends = (self.stdout_fd, self.stderr_fd, self.task_fd, self.note_fd)
        return tuple(fd for fd in ends if fd >= 0)


def merge_sys_path(front: list[str]) -> None:
    """Put the launcher's ``sys.path`` first in this process's, keeping the entries of this
    process that it lacks after it (modules the notebook imports then import here too)."""
    sys.path[:] = list(front) + [p for p in sys.path if p not in front]
