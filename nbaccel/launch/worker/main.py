"""Worker entry: output, environment, state, then its tasks (one for a launch, many for a pool)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import torch
import torch.distributed as dist

from ...environment import read_launch_environment, read_malloc_choice
from ...state import PartialState
from ...state.handshake import enter
from ...state.registry import STATE, reset_registry
from ..events import RankStateEvent
from ..guard import check_child_not_bad_fork
from ..lifeline import die_with_parent
from ..location import RankWhere
from ..protocol import AskWhere, Crash, Location, Notice, Ready, Reply, WorkerMessage, encode
from ..remote import capture_exception
from ..spec import WorkerMode, WorkerPipes, WorkerSpec
from ..states import RankState, WorkerPhase
from ..tasks import CallTask
from .allocator import give_back_freed_memory, keep_freed_memory
from .bars import text_bars_in_worker
from .collectives import keep_notes_in, track_collectives
from .display import install_worker_display
from .frames import mark_boundary
from .redirect import redirect_child_output
from .runner import TaskInbox, TaskRunner
from .whereami import Whereabouts

__all__ = ["run_worker", "spawn_entry"]


class _Channel:
    """The worker's end of its message pipe to the launcher (thread-safe)."""

    def __init__(self, fd: int, rank: int) -> None:
        self._conn = Connection(fd, readable=False)
        self.rank = rank
        self._lock = threading.Lock()

    def send(self, message: WorkerMessage) -> None:
        data = encode(message)
        with self._lock:
            self._conn.send_bytes(data)

    def notify(self, event: Any) -> None:
        """Send a launch event (a rank state change, progress, a rich display)."""
        self.send(Notice(self.rank, event))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.close()


def _prepare(spec: WorkerSpec, channel: _Channel, forked: bool) -> None:
    """Everything before a worker's first task: variables, state, display, threads."""
    os.environ.update(spec.env)  # launchers write the launch variables
    keep_freed_memory(read_malloc_choice())  # see allocator.py: no page faults every step
    reset_registry()  # a forked worker must not inherit the notebook's state
    STATE.event_sink = channel.notify
    STATE.worker_rank = spec.rank
    if spec.display:  # rich output and notebook bars reach the cell through the channel
        install_worker_display(channel.notify, spec.rank)
    if spec.num_threads:
        torch.set_num_threads(spec.num_threads)
    track_collectives()  # what "where is every rank?" reads; see collectives.py
    if spec.mode is WorkerMode.LAUNCH:  # it runs from now on (a pool's ranks: per task)
        restart = read_launch_environment().restart_count
        channel.notify(
            RankStateEvent(rank=spec.rank, state=RankState.RUNNING, restart_count=restart)
        )
    if forked:
        check_child_not_bad_fork()


def _inbox(task_fd: int, channel: _Channel, whereabouts: Whereabouts) -> TaskInbox | None:
    """The reader of the worker's task pipe; it answers :class:`AskWhere` at once."""
    if task_fd < 0:  # started without a task pipe: nobody can ask it
        return None
    rank = channel.rank

    def answer(ask: AskWhere) -> None:
        try:
            where = whereabouts.answer(ask.detail)
        except Exception:  # an answer, however poor, rather than a silent rank
            where = RankWhere(rank, whereabouts.host, os.getpid(), whereabouts.phase)
        with contextlib.suppress(OSError, ValueError):  # the worker is ending: no one asks
            channel.send(Location(rank, where, ask.request))

    return TaskInbox(task_fd, answer)


def _run_one_task(
    spec: WorkerSpec, task_fd: int, channel: _Channel, whereabouts: Whereabouts
) -> int:
    """A launch: the worker's one task is ``spec.function``; then the group is left."""
    runner = TaskRunner({}, spec.rank)
    task = CallTask(0, spec.function, spec.args, spec.kwargs)
    inbox = _inbox(task_fd, channel, whereabouts)
    name = getattr(spec.function, "__name__", "the function")
    whereabouts.enter(WorkerPhase.RUNNING, name)
    try:
        reply = runner.reply(0, lambda: runner.perform(task))
        failed = reply.error is not None
        whereabouts.enter(WorkerPhase.FAILED if failed else WorkerPhase.RETURNED, name)
        channel.send(Reply(spec.rank, reply))
        if failed:
            return 1
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                # every rank has finished joining before any closes its connections: a rank
                # that leaves first would cut a slower peer's handshake short
                enter("the end of the launched function")  # a peer still in a collective
                dist.destroy_process_group()  # fails at once (CollectiveMismatchError)
        return 0
    finally:
        if inbox is not None:
            inbox.close()


def _serve_tasks(
    spec: WorkerSpec, task_fd: int, channel: _Channel, whereabouts: Whereabouts
) -> int:
    """A pool: join the group once, then run each task read from the task pipe until told to
    stop. SIGINT is ignored between tasks and raises ``KeyboardInterrupt`` inside one."""

    state = PartialState()
    namespace: dict[str, Any] = {
        "rank": state.process_index,
        "local_rank": state.local_process_index,
        "world_size": state.num_processes,
        "device": state.device,
    }
    runner = TaskRunner(namespace, spec.rank)
    running = threading.Event()

    def interrupt(signum: int, frame: Any) -> None:
        if running.is_set():
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    inbox = _inbox(task_fd, channel, whereabouts)
    assert inbox is not None  # a pool's rank always has its task pipe
    channel.send(Ready(spec.rank, str(state.device), os.getpid()))
    try:
        for task in inbox:
            whereabouts.enter(WorkerPhase.RUNNING, task.label)
            try:
                reply = runner.handle(task.task_id, task.payload, running)
            finally:
                whereabouts.enter(WorkerPhase.IDLE, task.label)
            _flush_streams()  # the task's text reaches the relay before its reply
            channel.send(Reply(spec.rank, reply))
            give_back_freed_memory()  # an idle rank holds only what it uses
    finally:
        inbox.close()
    if dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    return 0


def _flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def run_worker(spec: WorkerSpec, pipes: WorkerPipes, forked: bool) -> int:
    """Run this (launched) process's tasks: ``spec.function`` for a launch, the task pipe's
    sequence for a pool; returns the exit code."""
    redirect_child_output(pipes.stdout_fd, pipes.stderr_fd)
    text_bars_in_worker()  # notebook progress bars cannot be drawn from a worker
    die_with_parent(pipes.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher decides when workers stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    channel = _Channel(pipes.message_fd, spec.rank)
    code = 1
    try:
        _prepare(spec, channel, forked)
        keep_notes_in(pipes.note_fd)  # the launcher names a collective this rank dies in
        serve = _run_one_task if spec.mode is WorkerMode.LAUNCH else _serve_tasks
        code = serve(spec, pipes.task_fd, channel, Whereabouts(spec.rank))
    except BaseException as exc:  # a failure of the worker machinery itself
        with contextlib.suppress(Exception):
            channel.send(Crash(spec.rank, capture_exception(exc, time.time())))
        code = 1
    finally:
        STATE.event_sink = None
        _flush_streams()
        channel.close()
    return code


mark_boundary(run_worker.__code__)  # a forked worker's older frames are the notebook's


def spawn_entry(data: bytes) -> None:
    """Entry point of a spawned worker: ``data`` is the pickled :class:`WorkerSpec`."""
    try:
        spec, pipes = WorkerSpec.loads(data)
    except BaseException as exc:  # e.g. the function's module cannot be imported here
        header = WorkerSpec.header(data)
        stdout_fd, stderr_fd, message_fd = header["fds"]
        redirect_child_output(stdout_fd, stderr_fd)
        channel = _Channel(message_fd, header["rank"])
        channel.send(Crash(channel.rank, capture_exception(exc, time.time())))
        channel.close()
        os._exit(1)
    os._exit(run_worker(spec, pipes, forked=False))
