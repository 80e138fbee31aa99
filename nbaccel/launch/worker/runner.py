"""The worker's side of tasks: run them one after another, answer "where are you?" at once."""

from __future__ import annotations

import ast
import builtins
import linecache
import pickle
import queue
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle

from ..protocol import AskWhere, Task, TaskReply, decode_for_worker
from ..remote import capture_exception
from ..tasks import CallTask, CellTask, PullTask, PushTask, RemoteRepr, cell_filename
from ..wire import dumps_for_parent

__all__ = ["TaskInbox", "TaskRunner", "run_cell"]


def run_cell(source: str, namespace: dict[str, Any], filename: str) -> Any:
    """Run ``source`` in ``namespace`` as IPython does: the last expression statement is
    evaluated separately and its value returned (None for a statement, or a trailing ``;``)."""
    tree = ast.parse(source, filename, "exec")
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    last: ast.Expression | None = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body[-1].value)
        tree.body.pop()
    exec(compile(tree, filename, "exec"), namespace)
    if last is None:
        return None
    value = eval(compile(last, filename, "eval"), namespace)
    return None if source.rstrip().endswith(";") else value


class TaskRunner:
    """Runs tasks in one rank; its namespace persists from task to task.

    Args:
        namespace: the rank's namespace (``rank``, ``local_rank``, ``world_size``, ``device``).
        rank: the rank, for messages.
    """

    def __init__(self, namespace: dict[str, Any], rank: int) -> None:
        self.namespace = namespace
        self.rank = rank
        self.namespace.setdefault("__name__", "__main__")
        self.namespace.setdefault("__builtins__", builtins)

    def perform(self, task: Any) -> Any:
        """Run one task; returns its value (exceptions propagate)."""
        if isinstance(task, CallTask):
            return task.function(*task.args, **task.kwargs)
        if isinstance(task, CellTask):
            return run_cell(task.source, self.namespace, cell_filename(task.label, task.task_id))
        if isinstance(task, PushTask):
            self.namespace.update(task.values)
            return None
        if isinstance(task, PullTask):
            if task.name not in self.namespace:
                raise NameError(f"name {task.name!r} is not defined on rank {self.rank}")
            return self.namespace[task.name]
        raise TypeError(f"unknown task {type(task).__name__}")

    def handle(self, task_id: int, payload: bytes, running: threading.Event) -> TaskReply:
        """Load and run one task from the pipe; ``running`` is set while its code runs."""
        is_cell = [False]

        def work() -> Any:
            task = cloudpickle.loads(payload)
            is_cell[0] = isinstance(task, CellTask)
            running.set()
            try:
                return self.perform(task)
            finally:
                running.clear()

        return self.reply(task_id, work, keep_unpicklable=lambda: is_cell[0])

    def reply(
        self, task_id: int, run: Callable[[], Any], keep_unpicklable: Callable[[], bool] = bool
    ) -> TaskReply:
        """Run ``run`` and wrap its value or exception for the parent.

        ``keep_unpicklable()`` true: a value that cannot be pickled comes back as its
        :class:`RemoteRepr` (a cell's last expression); otherwise it is an error.
        """
        try:
            value = run()
        except SystemExit as exc:
            if exc.code in (None, 0):
                return TaskReply(task_id, cloudpickle.dumps(None))
            return TaskReply(task_id, error=capture_exception(_user_frames(exc), time.time()))
        except BaseException as exc:
            return TaskReply(task_id, error=capture_exception(_user_frames(exc), time.time()))
        try:
            return TaskReply(task_id, dumps_for_parent(value))
        except Exception as exc:
            if keep_unpicklable():
                shown = RemoteRepr(repr(value), type(value).__qualname__)
                return TaskReply(task_id, pickle.dumps(shown))
            problem = TypeError(
                f"rank {self.rank} returned a {type(value).__module__}."
                f"{type(value).__qualname__}, which cannot be pickled to send it back to the "
                f"notebook ({type(exc).__name__}: {exc}). Return plain data instead: tensors, "
                "arrays, numbers, lists, dicts."
            )
            return TaskReply(task_id, error=capture_exception(problem, time.time()))


def _user_frames(exc: BaseException) -> BaseException:
    """``exc`` with the task machinery's own frames (this module's) left out of its traceback."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return exc.with_traceback(tb) if tb is not None else exc


class TaskInbox:
    """The worker's end of its task pipe: a reader thread answers :class:`AskWhere` at once
    (even while the main thread is stuck in C code) and queues every task for the main thread.

    The task itself is loaded on the main thread, so a function that cannot be loaded here
    fails as that task.
    """

    def __init__(self, fd: int, answer_where: Callable[[AskWhere], None]) -> None:
        self._conn = Connection(fd, writable=False)
        self._answer_where = answer_where
        self._queue: queue.Queue[Task | None] = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._read, name="nbaccel-task-inbox", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                data = self._conn.recv_bytes()
            except (EOFError, OSError, ValueError):  # ValueError: closed here meanwhile
                self._queue.put(None)  # the parent went away: as a Stop
                return
            if self._closed:  # the worker is ending: nothing more is answered or queued
                continue
            message = decode_for_worker(data)
            if isinstance(message, AskWhere):
                try:
                    self._answer_where(message)
                except Exception:
                    # the rank is on its way out (its channel closed, the interpreter ends):
                    # the launcher counts a missing answer as "no answer"; a rank's own output
                    # must never get a traceback of this thread
                    continue
            elif isinstance(message, Task):
                self._queue.put(message)
            else:  # Stop
                self._queue.put(None)
                return

    def __iter__(self) -> Iterator[Task]:
        """Each task until a :class:`Stop` (or the pipe's end)."""
        while True:
            task = self._queue.get()
            if task is None:
                return
            yield task

    def close(self) -> None:
        """The worker is done with its pipe. Closed here only once the reader thread has
        ended (a pool's Stop, the parent gone): closing a descriptor another thread is blocked
        reading lets a new file take its number, which that read would then consume. A
        launched rank's reader still waits: it drops what comes and the descriptor closes
        with the process."""
        self._closed = True
        if self._thread.is_alive():
            return
        try:
            self._conn.close()
        except OSError:
            pass
