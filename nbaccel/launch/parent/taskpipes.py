"""The pipes from the notebook to its local workers: a pool's tasks, and "where are you?".

Each local worker reads one pipe (``spec.task_fd``): a pool's rank takes its tasks there, and
every rank, launched or pooled, answers ``AskWhere`` from it on its reader thread. Writes may
come from two threads (a pool call's, and a ``where()`` asked from another thread), so they
are serialised here.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Collection, Iterable
from multiprocessing.connection import Connection
from typing import Protocol

__all__ = ["TaskPipes", "TaskSender"]


class TaskSender(Protocol):
    """What a launch group and a pool need of the ranks' task pipes: the notebook's ends that no
    forked worker may keep, a write to some ranks (``OSError`` where one is gone), one that
    leaves out ranks already gone, and the end of every pipe. The local
    kind is :class:`TaskPipes`; ``hoststart.AgentTasks`` sends through each host's agent."""

    @property
    def write_fds(self) -> tuple[int, ...]: ...

    def send(self, data: bytes, ranks: Collection[int]) -> None: ...

    def send_quietly(self, data: bytes, ranks: Collection[int]) -> None: ...

    def close(self) -> None: ...


class TaskPipes:
    """One pipe per local rank: the write end here, the read end handed to the worker."""

    def __init__(self, ranks: Iterable[int]) -> None:
        self._lock = threading.Lock()
        self._writers: dict[int, Connection] = {}
        self._readers: dict[int, int] = {}
        for rank in ranks:
            read_fd, write_fd = os.pipe()
            self._writers[rank] = Connection(write_fd, readable=False)
            self._readers[rank] = read_fd

    def read_fd(self, rank: int) -> int:
        """The read end of ``rank``'s pipe, for its worker's spec (``WorkerSpec.task_fd``)."""
        return self._readers[rank]

    @property
    def write_fds(self) -> tuple[int, ...]:
        """The notebook's ends, which no forked worker may keep."""
        return tuple(pipe.fileno() for pipe in self._writers.values() if not pipe.closed)

    def close_child_ends(self) -> None:
        """Close the workers' ends here once they started (each kept its own)."""
        for fd in self._readers.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._readers.clear()

    def send(self, data: bytes, ranks: Collection[int]) -> None:
        """Write one message to each rank in ``ranks`` (``OSError``: a rank's pipe is gone)."""
        with self._lock:
            for rank in ranks:
                self._writers[rank].send_bytes(data)

    def send_quietly(self, data: bytes, ranks: Collection[int]) -> None:
        """:meth:`send`, leaving out the ranks whose pipe is gone (they ended)."""
        for rank in ranks:
            with contextlib.suppress(OSError, KeyError):
                self.send(data, (rank,))

    def close(self) -> None:
        """Close every pipe (a worker reads it as "stop")."""
        self.close_child_ends()
        for pipe in self._writers.values():
            with contextlib.suppress(OSError):
                pipe.close()
        self._writers.clear()
