"""The supervisor: the one loop that watches a group of workers, for a launch and for a pool.

It waits on every worker's message pipe and on a pidfd per process at once, so a message or a
death is seen as it happens. Each message is decoded once (``protocol.decode``) and handed to
the owner's ``on_message``; what the messages mean is the owner's policy:
``launchgroup.LaunchGroup`` runs one task per rank to the end, ``poolgroup.PoolGroup`` feeds
its ranks task after task. Nothing outlives :meth:`Supervisor.release`: every process is
reaped and every descriptor closed.
"""

from __future__ import annotations

import contextlib
import select
import signal
import threading
import time
from collections.abc import Callable, Collection, Mapping
from multiprocessing.connection import wait
from typing import Any, Protocol

from ...environment import deepspeed_shm_buffer
from ..protocol import WorkerMessage, decode
from ..spec import WorkerPipes, WorkerSpec
from .processes import start_worker

__all__ = ["Starter", "Supervisor", "WorkerLink"]


class WorkerLink(Protocol):
    """One worker as the supervisor sees it: the seam where a worker that is not a local child
    process plugs in (``docs/architecture.md``, "Where a remote host plugs in").

    ``processes.WorkerHandle`` is the local one: a forked or spawned child, its message pipe
    and its pidfd; ``hostlinks.RemoteLink`` is a rank another host's agent runs.
    """

    spec: WorkerSpec
    pid: int
    conn: Any  # recv_bytes(), poll(timeout), fileno() and close(), as a Connection has
    conn_open: bool
    sentinel: int  # a descriptor readable once the worker has ended, or -1 (then: poll)
    exit_code: int | None

    def poll(self) -> int | None:
        """The exit code once the worker has ended (negative: the signal), else None."""

    def send_signal(self, sig: int) -> None:
        """Signal the worker if it still runs."""

    def kill(self) -> None:
        """Kill the worker if it still runs, and wait until it is gone."""

    def close(self) -> None:
        """Release what the launcher holds for this worker."""


# starts one worker: (its spec, its descriptors here or None, the launcher's descriptors it
# must not keep) -> its link
Starter = Callable[[WorkerSpec, WorkerPipes | None, tuple[int, ...]], WorkerLink]


class Supervisor:
    """The workers of one group on this machine, and the wait for their messages and exits.

    Args:
        specs: one spec per rank.
        pipes: rank -> its descriptors on this machine (none for a rank another machine
            starts).
        on_message: called in the launcher's process with every message a worker sends,
            decoded.
        keep_out: the launcher's own descriptors that no forked worker may keep (a pool's
            write ends of the task pipes).
        on_started: called once after :meth:`start` with ``{global rank: pid}``.
        starter: starts one worker and returns its link; default ``processes.start_worker``
            (a local child). A placement may give its own (``Placement.starter``).
        on_bytes: when given, receives ``(handle, the message's bytes)`` undecoded instead
            of ``on_message`` (a host's agent, which passes them on as they are).
    """

    def __init__(
        self,
        specs: list[WorkerSpec],
        pipes: Mapping[int, WorkerPipes],
        on_message: Callable[[WorkerMessage], None] | None,
        keep_out: tuple[int, ...] = (),
        on_started: Callable[[dict[int, int]], None] | None = None,
        starter: Starter | None = None,
        on_bytes: Callable[[WorkerLink, bytes], None] | None = None,
    ) -> None:
        self.starter: Starter = starter if starter is not None else start_worker
        self.specs = specs
        self.pipes = dict(pipes)
        self.on_message = on_message
        self.on_bytes = on_bytes
        self.keep_out = keep_out
        self.on_started = on_started
        self.handles: list[WorkerLink] = []
        # one reader at a time: a where() asked from another thread reads while no loop does
        self._reading = threading.RLock()

    def start(self) -> None:
        """Start every worker (a forked one keeps none of the others' descriptors)."""
        try:
            for spec in self.specs:
                others = [p for r, p in self.pipes.items() if r != spec.rank]
                foreign = [fd for p in others for fd in p.child_ends]
                foreign += self.keep_out
                for handle in self.handles:
                    foreign += [handle.conn.fileno(), handle.sentinel]
                mine = self.pipes.get(spec.rank)
                foreign = [fd for fd in foreign if fd >= 0]
                self.handles.append(self.starter(spec, mine, tuple(foreign)))
        except BaseException:  # e.g. an interrupt while starting: stop what did start
            self.kill_all(grace=0.5)
            self.release()
            raise
        if self.on_started is not None:
            self.on_started({h.spec.rank: h.pid for h in self.handles})

    # -- the wait ----------------------------------------------------------------------------
    def pump(self, timeout: float, also: Mapping[int, Callable[[], object]] | None = None) -> None:
        """Wait up to ``timeout`` s; hand on every message that arrived and note every exit.
        ``also``: more descriptors to wait on at once, each with what to call when it is
        readable (a host's agent: its channel to the notebook, its ranks' output)."""
        also = also or {}
        with self._reading:
            waitables: list[Any] = [h.conn for h in self.handles if h.conn_open]
            waitables += [
                h.sentinel for h in self.handles if h.exit_code is None and h.sentinel >= 0
            ]
            waitables += list(also)
            for ready in wait(waitables, timeout=timeout):
                if isinstance(ready, int) and ready in also:
                    also[ready]()
                    continue
                for handle in self.handles:
                    if ready is handle.conn:
                        self.receive(handle)
                        break
                    if ready == handle.sentinel:
                        handle.poll()
                        break

    def receive(self, handle: WorkerLink) -> None:
        """Read one message of ``handle``'s (or note that its pipe closed)."""
        try:
            data = handle.conn.recv_bytes()
        except (EOFError, OSError):
            handle.conn.close()
            handle.conn_open = False
            if handle.sentinel < 0:
                handle.poll()
            return
        if self.on_bytes is not None:
            self.on_bytes(handle, data)
        elif self.on_message is not None:
            self.on_message(decode(data))

    def drain(self, handle: WorkerLink) -> None:
        """Hand on what ``handle``'s pipe still holds (a dead worker's last words)."""
        with self._reading:
            while handle.conn_open and handle.conn.poll(0):
                self.receive(handle)

    def finished(self, handle: WorkerLink) -> bool:
        """The worker has exited and its pipe is read to the end."""
        return handle.exit_code is not None and not handle.conn_open

    def all_finished(self) -> bool:
        return all(self.finished(h) for h in self.handles)

    # -- signals and the end -----------------------------------------------------------------
    def signal(self, sig: int, ranks: Collection[int] | None = None) -> None:
        """Send ``sig`` to the workers of ``ranks`` (all when None) that still run."""
        for handle in self.handles:
            if ranks is None or handle.spec.rank in ranks:
                handle.send_signal(sig)

    def kill_all(self, grace: float) -> None:
        """Stop every worker now (SIGTERM, then SIGKILL after ``grace`` s) and reap them."""
        try:
            self.signal(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(h.poll() is None for h in self.handles):
                pending = [h.sentinel for h in self.handles if h.exit_code is None]
                pending = [fd for fd in pending if fd >= 0]
                if pending:
                    select.select(pending, [], [], 0.05)
                else:
                    time.sleep(0.02)
        finally:  # even when a second interrupt cuts the grace period short
            for handle in self.handles:
                handle.kill()

    def release(self) -> None:
        """Close the launcher's descriptors of every worker, and remove what a worker that
        trained with DeepSpeed on the CPU leaves in /dev/shm (DeepSpeed never does: 66 MB of
        memory per rank and launch, until the machine restarts)."""
        for handle in self.handles:
            with contextlib.suppress(OSError):
                handle.close()
        for spec in self.specs:
            buffer = deepspeed_shm_buffer(spec.rank, spec.env)
            if buffer is not None:
                with contextlib.suppress(OSError):
                    buffer.unlink(missing_ok=True)
