"""Start one worker process (fork or spawn) and hold it: its pid, pidfd and message pipe.

``supervisor.py`` watches the handles made here; this module only creates, signals, reaps and
closes them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from ..spec import WorkerPipes, WorkerSpec
from ..worker.redirect import redirect_child_output

__all__ = ["WorkerHandle", "close_link", "start_worker"]

_SPAWN_BOOTSTRAP = (
    "import sys; data = sys.stdin.buffer.read(); sys.stdin.close(); "
    "from nbaccel.launch.worker.main import spawn_entry; spawn_entry(data)"
)


@dataclass
class WorkerHandle:
    """One running worker as the launcher sees it."""

    spec: WorkerSpec
    pid: int
    conn: Connection
    sentinel: int
    popen: subprocess.Popen[bytes] | None = None
    exit_code: int | None = None
    conn_open: bool = True

    def poll(self) -> int | None:
        """Reap the process if it has exited; its exit code (negative: the signal) or None."""
        if self.exit_code is not None:
            return self.exit_code
        if self.popen is not None:
            self.exit_code = self.popen.poll()
            return self.exit_code
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            self.exit_code = -int(signal.SIGKILL)
            return self.exit_code
        if pid == 0:
            return None
        self.exit_code = os.waitstatus_to_exitcode(status)
        return self.exit_code

    def send_signal(self, sig: int) -> None:
        """Signal the process if it is still running."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL the process if it still runs, and wait until it is gone."""
        self.send_signal(signal.SIGKILL)
        if self.exit_code is None:
            with contextlib.suppress(ChildProcessError):
                if self.popen is not None:
                    self.exit_code = self.popen.wait()
                else:
                    _, status = os.waitpid(self.pid, 0)
                    self.exit_code = os.waitstatus_to_exitcode(status)

    def close(self) -> None:
        """Close the launcher's descriptors for this worker."""
        close_link(self)


def close_link(link: Any) -> None:
    """Close what the launcher holds for one worker link: its message connection and its
    sentinel descriptor (a local child's pidfd, a remote rank's exit pipe)."""
    if link.conn_open:
        link.conn.close()
        link.conn_open = False
    if link.sentinel >= 0:
        with contextlib.suppress(OSError):
            os.close(link.sentinel)
        link.sentinel = -1


def _pidfd(pid: int) -> int:
    opener = getattr(os, "pidfd_open", None)
    if opener is None:  # pragma: no cover - Linux < 5.3 or another OS
        return -1
    try:
        return int(opener(pid))
    except OSError:  # pragma: no cover
        return -1


@contextlib.contextmanager
def _quiet_fork() -> Iterator[None]:
    """Around ``os.fork()``: no garbage collection and no ``ResourceWarning`` until the child's
    output leads into the relay; restored in both processes on leaving.

    A kernel's objects that die in the child during the fork (ipykernel 6 keeps one zmq socket
    per thread, dropped with the threads the child does not have) warn as they go; printed
    through the kernel's inherited stream, the warning would touch the parent's zmq context
    from the child, which aborts the kernel (``mailbox.cpp`` assertion).
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            yield
    finally:
        if collecting:
            gc.enable()


def _start_fork(
    spec: WorkerSpec, pipes: WorkerPipes, read_fd: int, foreign: tuple[int, ...]
) -> WorkerHandle:
    # imported here: the child imports nothing before its redirect
    from ..worker.main import run_worker

    with _quiet_fork():
        pid = os.fork()
        if pid == 0:  # the child: never returns into the launcher's code
            code = 1
            try:
                gc.freeze()  # the kernel's objects are never collected (nor warn) here
                redirect_child_output(pipes.stdout_fd, pipes.stderr_fd)
                # already redirected: run_worker keeps them
                pipes = dataclasses.replace(pipes, stdout_fd=1, stderr_fd=2)
            except BaseException:
                os._exit(code)
    if pid == 0:
        try:
            os.setsid()  # its own session: the launcher alone decides when workers stop
            for fd in (read_fd, *foreign):  # other workers' pipes must not stay open here
                with contextlib.suppress(OSError):
                    os.close(fd)
            code = run_worker(spec, pipes, forked=True)
        finally:
            os._exit(code)
    return WorkerHandle(spec, pid, Connection(read_fd, writable=False), _pidfd(pid))


def _start_spawn(
    spec: WorkerSpec, pipes: WorkerPipes, read_fd: int, payload: bytes
) -> WorkerHandle:
    keep: tuple[int, ...] = (pipes.stdout_fd, pipes.stderr_fd, pipes.message_fd)
    if pipes.task_fd >= 0:  # its task pipe: a pool's tasks, and "where are you?"
        keep += (pipes.task_fd,)
    if pipes.note_fd >= 0:  # the page it notes its collectives in
        keep += (pipes.note_fd,)
    popen = subprocess.Popen(
        [sys.executable, "-c", _SPAWN_BOOTSTRAP],
        stdin=subprocess.PIPE,
        pass_fds=keep,
        start_new_session=True,
        close_fds=True,
    )
    assert popen.stdin is not None
    try:
        popen.stdin.write(payload)
    finally:
        popen.stdin.close()
    return WorkerHandle(
        spec, popen.pid, Connection(read_fd, writable=False), _pidfd(popen.pid), popen
    )


def start_worker(
    spec: WorkerSpec, pipes: WorkerPipes | None, foreign: tuple[int, ...] = ()
) -> WorkerHandle:
    """Start one worker for ``spec`` with its descriptors ``pipes`` here; the message pipe's
    write end is closed in the launcher.

    ``foreign`` lists the launcher's descriptors that belong to other workers: a forked
    worker closes them so that, e.g., another rank's output pipe ends when that rank exits.
    """
    if pipes is None:
        raise ValueError(f"rank {spec.rank} has no descriptors on this machine to start with")
    read_fd, write_fd = os.pipe()
    pipes = dataclasses.replace(pipes, message_fd=write_fd)
    try:
        if spec.start_method == "fork":
            return _start_fork(spec, pipes, read_fd, foreign)
        payload = spec.dumps(pipes)
        os.set_inheritable(write_fd, True)
        return _start_spawn(spec, pipes, read_fd, payload)
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
