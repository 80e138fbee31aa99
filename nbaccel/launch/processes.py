"""Start workers (fork or spawn), watch them, and tear them down.

The supervisor waits on every worker's message pipe and on a pidfd per process at once, so a
result, an event or a death is seen as it happens. When a rank fails, the others get SIGTERM
and, after a short grace period, SIGKILL. Nothing outlives :meth:`WorkerGroup.run`: every
process is reaped and every descriptor closed, also on ``KeyboardInterrupt``.
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

import cloudpickle

from .errors import LaunchStopped, RankFate, RemoteException
from .events import RankStateEvent
from .output import redirect_child_output
from .spec import WorkerSpec

__all__ = ["GroupOutcome", "WorkerGroup", "WorkerHandle"]

_SPAWN_BOOTSTRAP = (
    "import sys; data = sys.stdin.buffer.read(); sys.stdin.close(); "
    "from nbaccel.launch.worker import spawn_entry; spawn_entry(data)"
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

    def close(self) -> None:
        """Close the launcher's descriptors for this worker."""
        if self.conn_open:
            self.conn.close()
            self.conn_open = False
        if self.sentinel >= 0:
            with contextlib.suppress(OSError):
                os.close(self.sentinel)
            self.sentinel = -1


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


def _start_fork(spec: WorkerSpec, read_fd: int, foreign: tuple[int, ...]) -> WorkerHandle:
    from .worker import run_worker  # imported here: the child imports nothing before its redirect

    with _quiet_fork():
        pid = os.fork()
        if pid == 0:  # the child: never returns into the launcher's code
            code = 1
            try:
                gc.freeze()  # the kernel's objects are never collected (nor warn) here
                redirect_child_output(spec.stdout_fd, spec.stderr_fd)
                spec.stdout_fd, spec.stderr_fd = 1, 2  # already redirected: run_worker keeps them
            except BaseException:
                os._exit(code)
    if pid == 0:
        try:
            os.setsid()  # its own session: the launcher alone decides when workers stop
            for fd in (read_fd, *foreign):  # other workers' pipes must not stay open here
                with contextlib.suppress(OSError):
                    os.close(fd)
            code = run_worker(spec, forked=True)
        finally:
            os._exit(code)
    return WorkerHandle(spec, pid, Connection(read_fd, writable=False), _pidfd(pid))


def _start_spawn(spec: WorkerSpec, read_fd: int, payload: bytes) -> WorkerHandle:
    keep: tuple[int, ...] = (spec.stdout_fd, spec.stderr_fd, spec.result_fd)
    if spec.task_fd >= 0:  # a pool worker reads its tasks from this pipe
        keep += (spec.task_fd,)
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


def start_worker(spec: WorkerSpec, foreign: tuple[int, ...] = ()) -> WorkerHandle:
    """Start one worker for ``spec``; the message pipe's write end is closed in the launcher.

    ``foreign`` lists the launcher's descriptors that belong to other workers: a forked
    worker closes them so that, e.g., another rank's output pipe ends when that rank exits.
    """
    read_fd, write_fd = os.pipe()
    spec.result_fd = write_fd
    try:
        if spec.start_method == "fork":
            return _start_fork(spec, read_fd, foreign)
        payload = spec.dumps()
        os.set_inheritable(write_fd, True)
        return _start_spawn(spec, read_fd, payload)
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)


@dataclass
class GroupOutcome:
    """What a group of workers did: one fate per rank and the pickled results."""

    fates: list[RankFate]
    results: dict[int, bytes] = field(default_factory=dict)
    timed_out: bool = False


class WorkerGroup:
    """The workers of one attempt on this machine.

    Args:
        specs: one spec per local rank.
        on_event: called in the launcher for every event a worker emits.
        monitor_interval: seconds between checks of the deadline and the stop grace period.
        timeout: seconds after which ranks still running are stopped (None: no limit).
        grace: seconds between SIGTERM and SIGKILL when stopping workers.
        attempt: the restart count of this attempt (carried by the events it announces).
        stop_requested: when set (from any thread), the supervisor stops every worker as an
            interrupt does (SIGTERM, then SIGKILL after ``grace``) and :meth:`run` raises
            :class:`LaunchStopped`; checked every ``monitor_interval`` seconds.
        on_started: called once after :meth:`start` with ``{global rank: pid}``.
        on_wait: called by the supervising thread before each wait (so at least every
            ``monitor_interval`` seconds), e.g. to let a busy Jupyter kernel handle the
            dashboard's Stop click; it may set ``stop_requested``.
        keep_out: the launcher's own descriptors that no forked worker may keep (a pool's
            write ends of the task pipes).
    """

    def __init__(
        self,
        specs: list[WorkerSpec],
        on_event: Callable[[Any], None] | None = None,
        monitor_interval: float = 0.1,
        timeout: float | None = None,
        grace: float = 3.0,
        attempt: int = 0,
        stop_requested: threading.Event | None = None,
        on_started: Callable[[dict[int, int]], None] | None = None,
        on_wait: Callable[[], None] | None = None,
        keep_out: tuple[int, ...] = (),
    ) -> None:
        self.specs = specs
        self.keep_out = keep_out
        self.on_wait = on_wait
        self.stop_requested = stop_requested
        self.on_started = on_started
        self.on_event = on_event
        self.monitor_interval = monitor_interval
        self.timeout = timeout
        self.grace = grace
        self.attempt = attempt
        self.handles: list[WorkerHandle] = []
        self.fates = {s.rank: RankFate(s.rank, s.local_rank) for s in specs}
        self.results: dict[int, bytes] = {}
        self._stop_at: float | None = None
        self._killed = False  # the launcher has sent SIGKILL

    def start(self) -> None:
        """Start every worker."""
        output_fds = {s.rank: (s.stdout_fd, s.stderr_fd) for s in self.specs}
        try:
            for spec in self.specs:
                foreign = [fd for r, fds in output_fds.items() if r != spec.rank for fd in fds]
                foreign += [s.task_fd for s in self.specs if s.rank != spec.rank]
                foreign += self.keep_out
                for handle in self.handles:
                    foreign += [handle.conn.fileno(), handle.sentinel]
                self.handles.append(start_worker(spec, tuple(fd for fd in foreign if fd >= 0)))
        except BaseException:  # e.g. an interrupt while starting: stop what did start
            self.kill_all(grace=0.5)
            for handle in self.handles:
                handle.close()
            raise
        if self.on_started is not None:
            self.on_started({h.spec.rank: h.pid for h in self.handles})

    def run(self) -> GroupOutcome:
        """Supervise until every worker has exited; always reaps and closes everything."""
        try:
            timed_out = self._supervise()
        except BaseException:
            self.kill_all(grace=min(self.grace, 2.0))
            raise
        finally:
            for handle in self.handles:
                handle.close()
        return GroupOutcome([self.fates[s.rank] for s in self.specs], dict(self.results), timed_out)

    # -- the loop ----------------------------------------------------------------------------
    def _supervise(self) -> bool:
        started = time.monotonic()
        timed_out = False
        while any(not self._finished(h) for h in self.handles):
            if self.on_wait is not None:
                self.on_wait()
            if self.stop_requested is not None and self.stop_requested.is_set():
                raise LaunchStopped()  # run() stops every worker, as for an interrupt
            waitables: list[Any] = [h.conn for h in self.handles if h.conn_open]
            waitables += [
                h.sentinel for h in self.handles if h.exit_code is None and h.sentinel >= 0
            ]
            for ready in wait(waitables, timeout=self.monitor_interval):
                self._on_ready(ready)
            for handle in self.handles:
                if handle.poll() is not None and not handle.conn_open:
                    self._settle(handle)
            now = time.monotonic()
            if self._stop_at is None and any(f.failed for f in self.fates.values()):
                self._begin_stop(now)
            if self.timeout is not None and self._stop_at is None and now - started > self.timeout:
                timed_out = True
                for fate in self.fates.values():
                    if fate.state == "running":
                        fate.state, fate.when = "timed out", time.time()
                self._begin_stop(now)
            if self._stop_at is not None and now - self._stop_at > self.grace:
                self._killed = True
                for handle in self.handles:
                    handle.send_signal(signal.SIGKILL)
        return timed_out

    def _running(self) -> list[WorkerHandle]:
        return [h for h in self.handles if h.exit_code is None]

    def _finished(self, handle: WorkerHandle) -> bool:
        return handle.exit_code is not None and not handle.conn_open

    def _on_ready(self, ready: object) -> None:
        for handle in self.handles:
            if ready is handle.conn:
                self._receive(handle)
                return
            if ready == handle.sentinel:
                handle.poll()
                return

    def _receive(self, handle: WorkerHandle) -> None:
        try:
            data = handle.conn.recv_bytes()
        except (EOFError, OSError):
            handle.conn.close()
            handle.conn_open = False
            if handle.sentinel < 0:
                handle.poll()
            return
        kind, rank, payload = cloudpickle.loads(data)
        fate = self.fates[rank]
        if kind == "event":
            if self.on_event is not None:
                self.on_event(payload)
        elif kind == "result":
            self.results[rank] = payload
            fate.state = "returned"
            self._announce(fate, "returned")
        elif kind == "error":
            assert isinstance(payload, RemoteException)
            fate.state, fate.error, fate.when = "raised", payload, payload.when
            self._announce(fate, "failed")

    def _announce(self, fate: RankFate, state: str) -> None:
        if self.on_event is not None:
            self.on_event(RankStateEvent(rank=fate.rank, state=state, restart_count=self.attempt))

    def _settle(self, handle: WorkerHandle) -> None:
        fate = self.fates[handle.spec.rank]
        fate.exit_code = handle.exit_code
        if fate.state not in ("running", "timed out"):
            return
        code = handle.exit_code or 0
        if self._stopped_by_us(code):
            fate.state = "stopped" if fate.state == "running" else fate.state
            self._announce(fate, "stopped")
            return
        fate.state = "signalled" if code < 0 else "exited"
        fate.when = time.time()
        self._announce(fate, "failed")

    def _stopped_by_us(self, code: int) -> bool:
        """True when an exit code is what the launcher's own stop signals produce; an exit of
        the rank's own making (``os._exit(3)``, a crash) stays the rank's failure."""
        if self._stop_at is None:
            return False
        return code == -int(signal.SIGTERM) or (code == -int(signal.SIGKILL) and self._killed)

    def _begin_stop(self, now: float) -> None:
        self._stop_at = now
        for handle in self.handles:
            handle.send_signal(signal.SIGTERM)

    def kill_all(self, grace: float) -> None:
        """Stop every worker now (SIGTERM, then SIGKILL after ``grace`` s) and reap them."""
        try:
            for handle in self.handles:
                handle.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(h.poll() is None for h in self.handles):
                pending = [h.sentinel for h in self._running() if h.sentinel >= 0]
                if pending:
                    select.select(pending, [], [], 0.05)
                else:
                    time.sleep(0.02)
        finally:  # even when a second interrupt cuts the grace period short
            self._kill_and_reap()

    def _kill_and_reap(self) -> None:
        for handle in self.handles:
            handle.send_signal(signal.SIGKILL)
            if handle.exit_code is None:
                with contextlib.suppress(ChildProcessError):
                    if handle.popen is not None:
                        handle.exit_code = handle.popen.wait()
                    else:
                        _, status = os.waitpid(handle.pid, 0)
                        handle.exit_code = os.waitstatus_to_exitcode(status)
