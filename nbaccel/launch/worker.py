"""Worker entry: output -> environment -> state -> function -> result, in a launched process."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import torch
import torch.distributed as dist

from ..environment import read_launch_environment
from ..state.handshake import enter
from ..state.registry import STATE, reset_registry
from .bars import text_bars_in_worker
from .display import install_worker_display
from .errors import capture_exception
from .events import RankStateEvent
from .guard import check_child_not_bad_fork
from .output import redirect_child_output
from .spec import WorkerSpec
from .wire import dumps_for_parent

__all__ = ["run_worker", "spawn_entry"]

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to kill this worker when the launcher dies (Linux), else poll for it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux

        def watch() -> None:
            while os.getppid() == parent_pid:
                time.sleep(0.5)
            os._exit(1)

        threading.Thread(target=watch, name="nbaccel-parent-watch", daemon=True).start()
    if os.getppid() != parent_pid:  # the launcher died before prctl took effect
        os._exit(1)


class _Channel:
    """The worker's end of its message pipe to the launcher (thread-safe)."""

    def __init__(self, fd: int, rank: int) -> None:
        self._conn = Connection(fd, readable=False)
        self._rank = rank
        self._lock = threading.Lock()

    def send(self, kind: str, payload: Any) -> None:
        data = cloudpickle.dumps((kind, self._rank, payload))
        with self._lock:
            self._conn.send_bytes(data)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.close()


def _result_payload(spec: WorkerSpec, result: Any) -> bytes:
    try:
        return dumps_for_parent(result)
    except Exception as exc:
        raise TypeError(
            f"rank {spec.rank} returned a {type(result).__module__}.{type(result).__qualname__}, "
            f"which cannot be pickled to send it back to the notebook ({type(exc).__name__}: "
            f"{exc}). Return plain data instead: tensors, arrays, numbers, lists, dicts."
        ) from None


def _call(spec: WorkerSpec, channel: _Channel) -> int:
    try:
        result = spec.function(*spec.args, **spec.kwargs)
        payload = _result_payload(spec, result)
    except SystemExit as exc:
        if exc.code in (None, 0):
            channel.send("result", cloudpickle.dumps(None))
            return 0
        channel.send("error", capture_exception(exc, time.time()))
        return 1
    except BaseException as exc:
        channel.send("error", capture_exception(exc, time.time()))
        return 1
    channel.send("result", payload)
    return 0


def run_worker(spec: WorkerSpec, forked: bool) -> int:
    """Run ``spec.function`` in this (launched) process; returns the exit code."""
    redirect_child_output(spec.stdout_fd, spec.stderr_fd)
    text_bars_in_worker()  # notebook progress bars cannot be drawn from a worker
    _die_with_parent(spec.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher decides when workers stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    channel = _Channel(spec.result_fd, spec.rank)
    code = 1
    try:
        os.environ.update(spec.env)  # launchers write the launch variables
        reset_registry()  # a forked worker must not inherit the notebook's state
        STATE.event_sink = lambda event: channel.send("event", event)
        STATE.worker_rank = spec.rank
        if spec.display:  # rich output and notebook bars reach the cell through the channel
            install_worker_display(lambda event: channel.send("event", event), spec.rank)
        if spec.num_threads:
            torch.set_num_threads(spec.num_threads)
        restart = read_launch_environment().restart_count
        channel.send(
            "event", RankStateEvent(rank=spec.rank, state="running", restart_count=restart)
        )
        if forked:
            check_child_not_bad_fork()
        code = _call(spec, channel)
        if code == 0 and dist.is_initialized():
            with contextlib.suppress(Exception):
                # every rank has finished joining before any closes its connections: a rank
                # that leaves first would cut a slower peer's handshake short
                enter("the end of the launched function")  # a peer still in a collective
                dist.destroy_process_group()  # fails at once (CollectiveMismatchError)
    except BaseException as exc:  # a failure of the worker machinery itself
        with contextlib.suppress(Exception):
            channel.send("error", capture_exception(exc, time.time()))
        code = 1
    finally:
        STATE.event_sink = None
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        channel.close()
    return code


def spawn_entry(data: bytes) -> None:
    """Entry point of a spawned worker: ``data`` is the pickled :class:`WorkerSpec`."""
    try:
        spec = WorkerSpec.loads(data)
    except BaseException as exc:  # e.g. the function's module cannot be imported here
        header = WorkerSpec.header(data)
        stdout_fd, stderr_fd, result_fd = header["fds"]
        redirect_child_output(stdout_fd, stderr_fd)
        channel = _Channel(result_fd, header["rank"])
        channel.send("error", capture_exception(exc, time.time()))
        channel.close()
        os._exit(1)
    os._exit(run_worker(spec, forked=False))
