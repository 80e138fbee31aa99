"""A launch's policy over the supervisor: every rank runs its one task to the end.

When a rank fails, the others get SIGTERM and, after a short grace period, SIGKILL; a
``timeout`` stops ranks still running; ``stop_requested`` (the dashboard's Stop) stops every
rank as an interrupt does. Nothing outlives :meth:`LaunchGroup.run`: every process is reaped and
every descriptor closed, also on ``KeyboardInterrupt``.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..events import RankStateEvent
from ..protocol import Crash, Notice, Reply, WorkerMessage
from ..spec import WorkerSpec
from ..states import Fate, RankState
from .dashboards import StopFlag
from .errors import LaunchStopped, RankFate
from .supervisor import Starter, Supervisor, WorkerLink

__all__ = ["GroupOutcome", "LaunchGroup"]


@dataclass
class GroupOutcome:
    """What a group of workers did: one fate per rank and the pickled results."""

    fates: list[RankFate]
    results: dict[int, bytes] = field(default_factory=dict)
    timed_out: bool = False


class LaunchGroup:
    """The workers of one attempt of a launch on this machine.

    Args:
        specs: one spec per local rank.
        on_event: called in the launcher for every event a worker emits.
        monitor_interval: seconds between checks of the deadline and the stop grace period.
        timeout: seconds after which ranks still running are stopped (None: no limit).
        grace: seconds between SIGTERM and SIGKILL when stopping workers.
        attempt: the restart count of this attempt (carried by the events it announces).
        stop_requested: when set (from any thread), every worker is stopped as an interrupt
            does (SIGTERM, then SIGKILL after ``grace``) and :meth:`run` raises
            :class:`LaunchStopped`; checked every ``monitor_interval`` seconds.
        on_started: called once after :meth:`start` with ``{global rank: pid}``.
        on_wait: called by the supervising thread before each wait (so at least every
            ``monitor_interval`` seconds), e.g. to let a busy Jupyter kernel handle the
            dashboard's Stop click; it may set ``stop_requested``.
        starter: how each worker starts (see :class:`Supervisor`); default a local child.
    """

    def __init__(
        self,
        specs: list[WorkerSpec],
        on_event: Callable[[Any], None] | None = None,
        monitor_interval: float = 0.1,
        timeout: float | None = None,
        grace: float = 3.0,
        attempt: int = 0,
        stop_requested: StopFlag | None = None,
        on_started: Callable[[dict[int, int]], None] | None = None,
        on_wait: Callable[[], None] | None = None,
        starter: Starter | None = None,
    ) -> None:
        self.supervisor = Supervisor(
            specs, self._on_message, on_started=on_started, starter=starter
        )
        self.specs = specs
        self.on_wait = on_wait
        self.stop_requested = stop_requested
        self.on_event = on_event
        self.monitor_interval = monitor_interval
        self.timeout = timeout
        self.grace = grace
        self.attempt = attempt
        self.fates = {s.rank: RankFate(s.rank, s.local_rank) for s in specs}
        self.results: dict[int, bytes] = {}
        self._stop_at: float | None = None
        self._killed = False  # the launcher has sent SIGKILL

    def run(self) -> GroupOutcome:
        """Supervise until every worker has exited; always reaps and closes everything."""
        try:
            timed_out = self._supervise()
        except BaseException:
            self.supervisor.kill_all(grace=min(self.grace, 2.0))
            raise
        finally:
            self.supervisor.release()
        return GroupOutcome([self.fates[s.rank] for s in self.specs], dict(self.results), timed_out)

    # -- the loop ----------------------------------------------------------------------------
    def _supervise(self) -> bool:
        supervisor = self.supervisor
        started = time.monotonic()
        timed_out = False
        while not supervisor.all_finished():
            if self.on_wait is not None:
                self.on_wait()
            if self.stop_requested is not None and self.stop_requested.is_set():
                raise LaunchStopped()  # run() stops every worker, as for an interrupt
            supervisor.pump(self.monitor_interval)
            for handle in supervisor.handles:
                if handle.poll() is not None and not handle.conn_open:
                    self._settle(handle)
            now = time.monotonic()
            if self._stop_at is None and any(f.failed for f in self.fates.values()):
                self._begin_stop(now)
            if self.timeout is not None and self._stop_at is None and now - started > self.timeout:
                timed_out = True
                for fate in self.fates.values():
                    if fate.state == Fate.RUNNING:
                        fate.state, fate.when = Fate.TIMED_OUT, time.time()
                self._begin_stop(now)
            if self._stop_at is not None and now - self._stop_at > self.grace:
                self._killed = True
                supervisor.signal(signal.SIGKILL)
        return timed_out

    def _on_message(self, message: WorkerMessage) -> None:
        fate = self.fates[message.rank]
        if isinstance(message, Notice):
            if self.on_event is not None:
                self.on_event(message.event)
        elif isinstance(message, Reply) and message.reply.error is None:
            assert message.reply.value is not None  # a reply without an error has a value
            self.results[message.rank] = message.reply.value
            fate.state = Fate.RETURNED
            self._announce(fate, RankState.RETURNED)
        elif isinstance(message, Reply | Crash):
            error = message.reply.error if isinstance(message, Reply) else message.error
            assert error is not None
            fate.state, fate.error, fate.when = Fate.RAISED, error, error.when
            self._announce(fate, RankState.FAILED)

    def _announce(self, fate: RankFate, state: RankState) -> None:
        if self.on_event is not None:
            self.on_event(RankStateEvent(rank=fate.rank, state=state, restart_count=self.attempt))

    def _settle(self, handle: WorkerLink) -> None:
        fate = self.fates[handle.spec.rank]
        fate.exit_code = handle.exit_code
        if fate.state not in (Fate.RUNNING, Fate.TIMED_OUT):
            return
        code = handle.exit_code or 0
        if self._stopped_by_us(code):
            fate.state = Fate.STOPPED if fate.state == Fate.RUNNING else fate.state
            self._announce(fate, RankState.STOPPED)
            return
        fate.state = Fate.SIGNALLED if code < 0 else Fate.EXITED
        fate.when = time.time()
        self._announce(fate, RankState.FAILED)

    def _stopped_by_us(self, code: int) -> bool:
        """True when an exit code is what the launcher's own stop signals produce; an exit of
        the rank's own making (``os._exit(3)``, a crash) stays the rank's failure."""
        if self._stop_at is None:
            return False
        return code == -int(signal.SIGTERM) or (code == -int(signal.SIGKILL) and self._killed)

    def _begin_stop(self, now: float) -> None:
        self._stop_at = now
        self.supervisor.signal(signal.SIGTERM)
