"""The messages between a worker and the notebook's process, typed, with one encoder each way.

Worker -> parent, on the worker's message pipe (one ``Connection`` message each):

- :class:`Ready`: a pool rank joined the process group and waits for tasks;
- :class:`Notice`: a launch event (rank state, progress, metrics, rich display);
- :class:`Reply`: the answer to one task: a launch's function is task 0, a pool's tasks are
  numbered by the pool;
- :class:`Crash`: the worker machinery itself failed; the process is about to end;
- :class:`Location`: where the worker's main thread is and the collective it is in (the
  answer to :class:`AskWhere`).

Parent -> worker, on the worker's task pipe: :class:`Task` (a pool's task, pickled by
``tasks.encode_task``), :class:`AskWhere` and :class:`Stop`. A launched worker has the pipe
too; it reads only :class:`AskWhere` there.

A transport other than a local pipe (a remote host's agent relaying a worker's messages over
its own connection) carries the same bytes: :func:`encode` on one side, :func:`decode` on
the other (docs/architecture.md, "Where a remote host plugs in").
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import TypeAlias

import cloudpickle

from .events import Event
from .location import RankWhere
from .remote import RemoteException

__all__ = [
    "AskWhere",
    "Crash",
    "Location",
    "Notice",
    "ParentMessage",
    "Ready",
    "Reply",
    "Stop",
    "Task",
    "TaskReply",
    "WorkerMessage",
    "decode",
    "decode_for_worker",
    "encode",
    "encode_for_worker",
]


@dataclass
class TaskReply:
    """A worker's answer to one task: the pickled value, or the exception it raised."""

    task_id: int
    value: bytes | None = None
    error: RemoteException | None = None


@dataclass(frozen=True)
class Ready:
    """A pool rank is in the process group and waits for tasks."""

    rank: int
    device: str
    pid: int


@dataclass(frozen=True)
class Notice:
    """A launch event of the rank's (an ``events.Event``: a state, progress, a rich display)."""

    rank: int
    event: Event


@dataclass(frozen=True)
class Reply:
    """The rank's answer to one task."""

    rank: int
    reply: TaskReply


@dataclass(frozen=True)
class Crash:
    """The worker machinery failed outside any task (the process ends next)."""

    rank: int
    error: RemoteException


@dataclass(frozen=True)
class Location:
    """Where the rank's main thread is now: the answer to the :class:`AskWhere` numbered
    ``request``."""

    rank: int
    where: RankWhere
    request: int = 0


WorkerMessage: TypeAlias = Ready | Notice | Reply | Crash | Location


@dataclass(frozen=True)
class Task:
    """One task for a pool rank; ``payload`` is the cloudpickled task, loaded by the rank's
    main thread so that a task that cannot be loaded there fails as that task."""

    task_id: int
    label: str
    payload: bytes


@dataclass(frozen=True)
class AskWhere:
    """Ask the rank where its main thread is (answered by its reader thread at once, even
    while the main thread is inside C code). ``request`` comes back in the :class:`Location`;
    ``detail`` asks for the whole stack too (the periodic checks leave it out)."""

    request: int = 0
    detail: bool = False


@dataclass(frozen=True)
class Stop:
    """Leave the task loop and end (also what a closed task pipe means)."""


ParentMessage: TypeAlias = Task | AskWhere | Stop

_WORKER_KINDS = (Ready, Notice, Reply, Crash, Location)
_PARENT_KINDS = (Task, AskWhere, Stop)


def encode(message: WorkerMessage) -> bytes:
    """A worker's message as it travels (cloudpickle: events may carry notebook classes)."""
    return bytes(cloudpickle.dumps(message))


def decode(data: bytes) -> WorkerMessage:
    """Inverse of :func:`encode`; anything else on the pipe is a protocol error."""
    message = cloudpickle.loads(data)
    if not isinstance(message, _WORKER_KINDS):
        raise TypeError(f"not a worker message: {type(message).__name__}")
    return message


def encode_for_worker(message: ParentMessage) -> bytes:
    """A parent's message for a pool worker's task pipe."""
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def decode_for_worker(data: bytes) -> ParentMessage:
    """Inverse of :func:`encode_for_worker`."""
    message = pickle.loads(data)
    if not isinstance(message, _PARENT_KINDS):
        raise TypeError(f"not a parent message: {type(message).__name__}")
    return message
