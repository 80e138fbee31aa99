"""The tasks a pool sends its ranks: a function, a cell's source, a push or a pull.

The parent encodes them (:func:`encode_task`); ``worker/runner.py`` runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .protocol import Task, encode_for_worker
from .wire import dumps_for_worker

__all__ = [
    "CallTask",
    "CellTask",
    "PullTask",
    "PushTask",
    "RemoteRepr",
    "cell_filename",
    "encode_task",
    "group_values",
]


@dataclass
class CallTask:
    """Call ``function(*args, **kwargs)`` (``WorkerPool.run``; the one task of a launch)."""

    task_id: int
    function: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    label: str = ""


@dataclass
class CellTask:
    """Run a cell's source in the rank's namespace; the value of a last expression returns."""

    task_id: int
    source: str
    label: str = ""


@dataclass
class PushTask:
    """Set names in the rank's namespace."""

    task_id: int
    values: dict[str, Any]
    label: str = "push"


@dataclass
class PullTask:
    """Read one name of the rank's namespace."""

    task_id: int
    name: str
    label: str = "pull"


def encode_task(task: CallTask | CellTask | PushTask | PullTask) -> bytes:
    """One task as it travels down a pool worker's task pipe (functions by value)."""
    try:
        payload = dumps_for_worker(task)
    except Exception as exc:
        raise TypeError(
            "the pool must send the function and its arguments (or the pushed values) to its "
            f"workers, but they could not be pickled: {type(exc).__name__}: {exc}. Pass values "
            "that can be pickled, or create them inside the task (pool.execute)."
        ) from exc
    return encode_for_worker(Task(task.task_id, task.label, payload))


class RemoteRepr:
    """Stands for a value that could not travel back to the notebook: shows the rank's repr."""

    def __init__(self, text: str, type_name: str) -> None:
        self.text = text
        self.type_name = type_name

    def __repr__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemoteRepr) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def cell_filename(label: str, task_id: int) -> str:
    """The pseudo-file a cell's code is compiled under (shown in tracebacks)."""
    return f"<nbaccel cell {label}>" if label else f"<nbaccel task {task_id}>"


def group_values(values: list[Any]) -> list[tuple[list[int], Any]]:
    """``execute``'s per-rank values grouped by equal ``repr``: ``[(ranks, value), ...]`` in
    rank order, so a caller can show a value that every rank returned once."""
    groups: dict[str, tuple[list[int], Any]] = {}
    for rank, value in enumerate(values):
        groups.setdefault(repr(value), ([], value))[0].append(rank)
    return list(groups.values())
