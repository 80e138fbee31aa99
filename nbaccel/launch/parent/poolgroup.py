"""One generation of a worker pool's processes: started and joined together, fed tasks, ended."""

from __future__ import annotations

import contextlib
import signal
import sys
import time
import weakref
from collections.abc import Callable, Collection
from multiprocessing.connection import wait
from typing import Any, TextIO, cast

from ..config import LaunchConfig
from ..events import Event, EventSink
from ..guard import StartMethod
from ..protocol import (
    Crash,
    Location,
    Notice,
    Ready,
    Reply,
    Stop,
    TaskReply,
    WorkerMessage,
    encode_for_worker,
)
from ..remote import RemoteException
from ..spec import WorkerMode
from ..states import Fate
from ..supervision.supervisor import Supervisor, WorkerLink
from .dashboards import StopFlag
from .errors import RankFate, build_error, ended_fate
from .launchgroup import raised_in
from .placement import Placement, PlaceRequest, RankWork
from .places import place
from .poolerrors import RankDied, RanksStuck, StuckReason
from .stalls import Finding
from .watch import WhereWatch
from .wheretable import WhereTable

__all__ = [
    "CurrentStream",
    "PoolGroup",
    "close_groups_quietly",
    "weak_forward",
]

_POLL_S = 0.05


class CurrentStream:
    """``sys.stdout`` or ``sys.stderr`` as it is at each write: a pool outlives the cell it
    was started in, so its ranks' lines go where the running call's own output goes."""

    def __init__(self, name: str) -> None:
        self.name = name

    def write(self, text: str) -> int:
        return int(getattr(sys, self.name).write(text) or 0)

    def flush(self) -> None:
        getattr(sys, self.name).flush()


class PoolGroup:
    """The processes of one generation of a pool, wherever its placement puts them.

    Args:
        config: the pool's validated settings.
        method: ``"fork"`` or ``"spawn"``.
        generation: 0 for the first start, then 1, 2, ... after each restart.
        on_event: receives every worker event (display messages are drawn first).
        line_sink: also receives every output line (the dashboard).
    """

    def __init__(
        self,
        config: LaunchConfig,
        method: StartMethod,
        generation: int,
        on_event: EventSink | None,
        line_sink: Callable[[int, str, str], None] | None,
    ) -> None:
        self.config = config
        self.method = method
        self.generation = generation
        self.user_on_event = on_event
        self.line_sink = line_sink
        self.ranks = list(range(config.world_size))
        self.placement: Placement | None = None
        self.on_event = on_event
        self.supervisor: Supervisor | None = None
        self.replies: dict[int, TaskReply] = {}
        self.ready: dict[int, Ready] = {}
        self.crashed: dict[int, RemoteException] = {}
        self.watch = WhereWatch(
            self, self.ranks, stall_timeout=config.stall_timeout, on_stall=config.on_stall
        )

    def host_of(self, rank: int) -> str:
        """The ``hosts=`` entry that runs ``rank`` (empty: this machine)."""
        return self.placement.host_of(rank) if self.placement is not None else ""

    # -- start -------------------------------------------------------------------------------
    def start(self, timeout: float) -> None:
        """Place the ranks (on another host: its agent is started and checked first), start
        them, and wait (up to ``timeout`` s from now) until each has joined the group."""
        deadline = time.monotonic() + timeout  # counted from before anything starts
        streams = (cast(TextIO, CurrentStream("stdout")), cast(TextIO, CurrentStream("stderr")))
        request = PlaceRequest(
            self.config,
            self.method,
            self.generation,
            RankWork(WorkerMode.POOL),
            self.user_on_event,
            self.line_sink,
            streams,
        )
        self.placement = placement = place(request)
        self.config = placement.config  # with what the place decided (the hosts' device)
        self.on_event = placement.on_event
        if self.generation == 0:
            print(placement.announce("Starting a pool of"), flush=True)
        self.supervisor = placement.supervisor(self._on_message)
        placement.start(self.supervisor)
        self._wait_ready(timeout, deadline)

    def _wait_ready(self, timeout: float, deadline: float) -> None:
        while len(self.ready) < len(self.ranks):
            left = deadline - time.monotonic()
            self.pump(min(_POLL_S, max(left, 0.0)))
            self.check_alive()
            if len(self.ready) < len(self.ranks) and time.monotonic() > deadline:
                late = [r for r in self.ranks if r not in self.ready]
                raise TimeoutError(
                    f"the pool's rank(s) {late} did not join the process group within "
                    f"{timeout:.0f}s; nothing is left running. Raise start_timeout=, or look "
                    "at the ranks' output above for what held them up."
                )

    @property
    def handles(self) -> list[WorkerLink]:
        """The workers' handles, by rank."""
        return self.supervisor.handles if self.supervisor is not None else []

    def pids(self) -> dict[int, int]:
        """Rank -> pid."""
        return {h.spec.rank: h.pid for h in self.handles}

    # -- messages ----------------------------------------------------------------------------
    def send(self, message: bytes, ranks: Collection[int]) -> None:
        """Write one pipe message to each rank in ``ranks`` (``OSError``: a rank is gone)."""
        if self.placement is None:
            raise OSError("the pool's ranks are not started")
        self.placement.pipes.send(message, ranks)

    def send_quietly(self, message: bytes, ranks: Collection[int]) -> None:
        """As :meth:`send`, where a rank that is gone is not an error."""
        if self.placement is not None:
            self.placement.pipes.send_quietly(message, ranks)

    def pump(self, timeout: float) -> None:
        """Wait up to ``timeout`` s and handle every message and exit that arrived."""
        if self.supervisor is not None:
            self.supervisor.pump(timeout)

    def _on_message(self, message: WorkerMessage) -> None:
        if isinstance(message, Notice):
            if self.on_event is not None:
                self.on_event(message.event)
        elif isinstance(message, Reply):
            self.replies[message.rank] = message.reply
        elif isinstance(message, Location):
            self.watch.on_location(message)
        elif isinstance(message, Ready):
            self.ready[message.rank] = message
        elif isinstance(message, Crash):  # the worker machinery failed; the process ends next
            self.crashed[message.rank] = message.error

    def before_wait(self) -> None:
        """Called before each wait of a call: the placement's wait hook."""
        if self.placement is not None:
            self.placement.before_wait()

    def memory_elsewhere(self) -> dict[int, int]:
        """Rank -> RSS of ranks on other machines (this machine's are read by pid)."""
        return self.placement.memory_elsewhere() if self.placement is not None else {}

    def check_alive(self) -> None:
        """Raise :class:`RankDied` when a worker has ended (or its message pipe closed)."""
        dead = [h for h in self.handles if h.poll() is not None or not h.conn_open]
        if not dead:
            return
        assert self.supervisor is not None
        for handle in dead:  # its last words (an exception) may still be in the pipe
            self.supervisor.drain(handle)
            deadline = time.monotonic() + 3.0  # its pipe closed: its exit status follows
            while handle.poll() is None and time.monotonic() < deadline:
                wait([handle.sentinel] if handle.sentinel >= 0 else [], timeout=_POLL_S)
        fates = []
        for handle in self.handles:
            rank = handle.spec.rank
            fate = RankFate(rank, rank, exit_code=handle.poll(), host=self.host_of(rank))
            if handle in dead:
                error = self.crashed.get(rank)
                fate.state = ended_fate(fate.exit_code, error)
                fate.error, fate.when = error, time.time()
                if error is None and self.placement is not None:
                    fate.collective = self.placement.collective_of(rank)
            else:
                fate.state = Fate.STOPPED
            fates.append(fate)
        lost = self.placement.lost() if self.placement is not None else None
        if lost is not None:  # a machine was lost: say so, not its ranks' symptoms
            raise RankDied(lost, fates)
        cause = next(f for f in fates if f.failed)
        raise RankDied(build_error(cause, fates), fates)

    # -- one task ----------------------------------------------------------------------------
    def collect(
        self,
        task_id: int,
        ranks: Collection[int],
        grace: float,
        timeout: float | None,
        stop: StopFlag | None = None,
        on_wait: Callable[[], None] | None = None,
    ) -> tuple[dict[int, TaskReply], bool]:
        """Wait for every rank's reply to ``task_id``; returns them and whether the call was
        interrupted (then each rank got SIGINT: the task raised ``KeyboardInterrupt`` there).
        ``stop`` set (the dashboard's Stop) interrupts the ranks as a kernel interrupt does;
        ``on_wait`` is called before each wait (the dashboard reads the Stop click there).

        Raises:
            RankDied: a worker ended.
            RanksStuck: ranks did not answer within ``grace`` s of a peer's failure or of the
                interrupt, or within ``timeout`` s of the start.
        """
        with self.watch:
            return self._collect(task_id, set(ranks), grace, timeout, stop, on_wait)

    def _collect(
        self,
        task_id: int,
        pending: set[int],
        grace: float,
        timeout: float | None,
        stop: StopFlag | None,
        on_wait: Callable[[], None] | None,
    ) -> tuple[dict[int, TaskReply], bool]:
        done: dict[int, TaskReply] = {}
        started = time.monotonic()
        failed_at: float | None = None
        interrupted_at: float | None = None
        while pending:
            try:  # an interrupt anywhere in a round interrupts the ranks, once
                self.before_wait()
                if on_wait is not None:
                    on_wait()
                if stop is not None and stop.is_set() and interrupted_at is None:
                    raise KeyboardInterrupt
                self.pump(_POLL_S)
                self.check_alive()
                if pending and failed_at is None and interrupted_at is None:
                    self.watch.tick()
            except KeyboardInterrupt:
                if interrupted_at is not None:  # a second interrupt: stop waiting
                    raise RanksStuck(sorted(pending), done, StuckReason.INTERRUPTED_TWICE) from None
                interrupted_at = time.monotonic()
                self.interrupt(pending)
                continue
            for rank in list(pending):
                reply = self.replies.get(rank)
                if reply is not None and reply.task_id == task_id:
                    pending.discard(rank)
                    done[rank] = self.replies.pop(rank)
                    if reply.error is not None and failed_at is None:
                        failed_at = time.monotonic()
            now = time.monotonic()
            if pending and failed_at is not None and now - failed_at > grace:
                raise RanksStuck(sorted(pending), done, StuckReason.PEER_FAILED)
            if pending and interrupted_at is not None and now - interrupted_at > grace:
                raise RanksStuck(sorted(pending), done, StuckReason.INTERRUPTED)
            if pending and timeout is not None and now - started > timeout:
                raise RanksStuck(sorted(pending), done, StuckReason.TIMEOUT)
            quiet = failed_at is None and interrupted_at is None
            if pending and quiet and self.watch.raised is not None:
                raise RanksStuck(sorted(pending), done, StuckReason.STALL, self.watch.raised)
        self.drain()
        return done, interrupted_at is not None

    def interrupt(self, ranks: Collection[int]) -> None:
        """Send SIGINT to the ranks: their running task raises ``KeyboardInterrupt``."""
        if self.supervisor is not None:
            self.supervisor.signal(signal.SIGINT, ranks)

    def where(self, timeout: float = 3.0) -> WhereTable:
        """Where every rank is now (see ``watch.WhereWatch.where``); from any thread."""
        return self.watch.where(timeout)

    def left_behind(self, fates: list[RankFate]) -> tuple[WhereTable | None, list[Finding]]:
        """After a rank died: where the others are, and what went wrong (their errors come
        in first: a collective a peer left fails on the others too)."""
        table = self.where(timeout=2.0) if self.live_ranks() else None
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and any(r not in self.replies for r in self.live_ranks()):
            self.pump(_POLL_S)
        calls = raised_in(fates)
        for rank, reply in self.replies.items():
            if reply.error is not None and reply.error.collective is not None:
                calls.setdefault(rank, reply.error.collective)
        return table, self.watch.explain(calls)

    def live_ranks(self) -> list[int]:
        """The ranks whose process still runs."""
        return [h.spec.rank for h in self.handles if h.exit_code is None and h.conn_open]

    def exited_ranks(self) -> list[int]:
        """The ranks whose process ended."""
        return [h.spec.rank for h in self.handles if h.exit_code is not None]

    def drain(self) -> None:
        """Stream every whole line the ranks have written so far."""
        if self.placement is not None:
            self.placement.drain()

    # -- end ---------------------------------------------------------------------------------
    def close(self, grace: float = 3.0) -> None:
        """Stop the workers (asked first, then SIGTERM and SIGKILL) and release everything."""
        try:
            alive = [h.spec.rank for h in self.handles if h.poll() is None]
            with contextlib.suppress(OSError):
                self.send(encode_for_worker(Stop()), alive)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(h.poll() is None for h in self.handles):
                self.pump(_POLL_S)
        finally:
            self._release()

    def _release(self) -> None:
        try:
            if self.supervisor is not None:
                try:
                    self.supervisor.kill_all(grace=0.5)
                finally:
                    self.supervisor.release()
        finally:
            if self.placement is not None:
                self.placement.close()


def weak_forward(life: Any) -> EventSink:
    """An ``on_event`` that passes the group's events to its pool (``PoolLife.from_group``)
    while the pool lives (the group must not keep a dropped pool alive)."""
    ref = weakref.ref(life)

    def forward(event: Event) -> None:
        alive = ref()
        if alive is not None:
            alive.from_group(event)

    return forward


def close_groups_quietly(holder: list[PoolGroup]) -> None:
    """At garbage collection or exit: stop a pool that was never shut down."""
    for group in holder:
        with contextlib.suppress(Exception):
            group.close(grace=1.0)
    holder.clear()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
