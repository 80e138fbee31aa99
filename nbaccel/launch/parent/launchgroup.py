"""A launch's policy over the supervisor: every rank runs its one task to the end.

When a rank fails, the others get SIGTERM and, after a short grace period, SIGKILL; a
``timeout`` stops ranks still running; ``stop_requested`` (the dashboard's Stop) stops every
rank as an interrupt does; a stalled or diverged collective is reported (``watch.WhereWatch``)
and, with ``on_stall="raise"``, stops every rank. Before ranks are stopped while others still
run, the group asks each where it is: the error shows that table. Nothing outlives
:meth:`LaunchGroup.run`: every process is reaped and every descriptor closed, also on
``KeyboardInterrupt``.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from ..config import OnStall
from ..events import RankStateEvent
from ..location import CollectiveCall
from ..protocol import Crash, Location, Notice, Reply, WorkerMessage
from ..states import Fate
from ..supervision.supervisor import WorkerLink
from .dashboards import StopFlag
from .errors import LaunchStopped, RankFate, ended_fate
from .placement import Placement
from .stalls import Finding
from .watch import WhereWatch
from .wheretable import WhereTable

__all__ = ["GroupOutcome", "LaunchGroup", "raised_in"]


def raised_in(fates: list[RankFate]) -> dict[int, CollectiveCall]:
    """The collective each failed rank's exception was raised in, where it was one."""
    return {
        f.rank: f.error.collective
        for f in fates
        if f.error is not None and f.error.collective is not None
    }


@dataclass
class GroupOutcome:
    """What a group of workers did: one fate per rank and the pickled results."""

    fates: list[RankFate]
    results: dict[int, bytes] = field(default_factory=dict)
    timed_out: bool = False
    stalled: tuple[Finding, WhereTable] | None = None  # on_stall="raise" stopped the ranks
    where: WhereTable | None = None  # where the ranks were when the launcher stopped them
    findings: list[Finding] = field(default_factory=list)  # what that table shows went wrong


class LaunchGroup:
    """The workers of one attempt of a launch, wherever its placement put them.

    Args:
        placement: the ranks, placed (``placement.py``): their specs, how each starts, their
            task pipes, the relay of their output, the wait hook and the loss check.
        monitor_interval: seconds between checks of the deadline and the stop grace period.
        timeout: seconds after which ranks still running are stopped (None: no limit).
        grace: seconds between SIGTERM and SIGKILL when stopping workers.
        attempt: the restart count of this attempt (carried by the events it announces).
        stop_requested: when set (from any thread), every worker is stopped as an interrupt
            does (SIGTERM, then SIGKILL after ``grace``) and :meth:`run` raises
            :class:`LaunchStopped`; checked every ``monitor_interval`` seconds.
        on_started: called once after :meth:`start` with ``{global rank: pid}`` (ranks of this
            machine only).
        on_wait: called by the supervising thread before each wait (so at least every
            ``monitor_interval`` seconds), e.g. to let a busy Jupyter kernel handle the
            dashboard's Stop click; it may set ``stop_requested``.
        stall_timeout: seconds in one collective that count as a stall (None: no watch).
        on_stall: ``"warn"`` or ``"raise"``.
    """

    def __init__(
        self,
        placement: Placement,
        monitor_interval: float = 0.1,
        timeout: float | None = None,
        grace: float = 3.0,
        attempt: int = 0,
        stop_requested: StopFlag | None = None,
        on_started: Callable[[dict[int, int]], None] | None = None,
        on_wait: Callable[[], None] | None = None,
        stall_timeout: float | None = None,
        on_stall: OnStall = "warn",
    ) -> None:
        self.placement = placement
        self.supervisor = placement.supervisor(self._on_message, on_started)
        self.specs = specs = placement.specs
        self.on_wait = on_wait
        self.stop_requested = stop_requested
        self.on_event = placement.on_event
        self.monitor_interval = monitor_interval
        self.timeout = timeout
        self.grace = grace
        self.attempt = attempt
        self.fates = {
            s.rank: RankFate(s.rank, s.local_rank, host=placement.host_of(s.rank)) for s in specs
        }
        self.results: dict[int, bytes] = {}
        self._stop_at: float | None = None
        self._killed = False  # the launcher has sent SIGKILL
        self.where: WhereTable | None = None
        self._explain = False  # say what went wrong, once every rank's error is in
        self.watch = WhereWatch(
            self, [s.rank for s in specs], stall_timeout=stall_timeout, on_stall=on_stall
        )

    def run(self) -> GroupOutcome:
        """Supervise until every worker has exited; always reaps and closes everything."""
        try:
            with self.watch:
                timed_out = self._supervise()
        except KeyboardInterrupt as interrupt:  # the kernel's, or the dashboard's Stop
            self._stop_after_interrupt(interrupt)
            raise
        except BaseException:
            self.supervisor.kill_all(grace=min(self.grace, 2.0))
            raise
        finally:
            self.supervisor.release()
        fates = [self.fates[s.rank] for s in self.specs]
        findings = self.watch.explain(raised_in(fates)) if self._explain else []
        return GroupOutcome(
            fates, dict(self.results), timed_out, self.watch.raised, self.where, findings
        )

    def _stop_after_interrupt(self, interrupt: KeyboardInterrupt) -> None:
        """SIGTERM every rank; ranks still running when the grace period ran out (a handler of
        their own kept them alive) are asked where they are, named in ``interrupt``'s message
        with the table, and killed."""
        grace = min(self.grace, 2.0)
        supervisor = self.supervisor
        try:
            supervisor.signal(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and not supervisor.all_finished():
                supervisor.pump(0.05)
            left = self.live_ranks()
            if left:
                table = self.watch.where(timeout=1.0)
                note = (
                    f"nbaccel: rank(s) {left} did not stop within {grace:g}s of the interrupt "
                    f"(SIGTERM; a signal handler of theirs?) and were killed. Where every rank "
                    f"was then:\n{table.text('  ')}"
                )
                said = str(interrupt)  # in the message: every IPython shows it
                interrupt.args = (f"{said}\n\n{note}" if said else note,)
        finally:
            supervisor.kill_all(grace=0.0)  # SIGKILL what is left, and reap

    # -- the loop ----------------------------------------------------------------------------
    def _supervise(self) -> bool:
        supervisor = self.supervisor
        started = time.monotonic()
        timed_out = False
        while not supervisor.all_finished():
            self.placement.before_wait()
            if self.on_wait is not None:
                self.on_wait()
            if self.stop_requested is not None and self.stop_requested.is_set():
                raise LaunchStopped()  # run() stops every worker, as for an interrupt
            supervisor.pump(self.monitor_interval)
            self._settle_finished()
            if self._stop_at is None:
                self.watch.tick()
            now = time.monotonic()
            if self._stop_at is None and any(f.failed for f in self.fates.values()):
                self._begin_stop(now, ask_where=True)
                self._settle_finished()  # asking read the pipes: exits may have come in
            if self.timeout is not None and self._stop_at is None and now - started > self.timeout:
                timed_out = True
                self._begin_stop(now, ask_where=True)
                self._settle_finished()
                self._mark_running(Fate.TIMED_OUT)
            if self._stop_at is None and self.watch.raised is not None:
                self._mark_running(Fate.STALLED)
                self._begin_stop(now)
            if self._stop_at is not None and now - self._stop_at > self.grace:
                self._killed = True
                supervisor.signal(signal.SIGKILL)
        return timed_out

    def _settle_finished(self) -> None:
        for handle in self.supervisor.handles:
            if handle.poll() is not None and not handle.conn_open:
                self._settle(handle)

    # -- what the watch asks (watch.WatchedGroup) --------------------------------------------
    def send_quietly(self, message: bytes, ranks: Collection[int]) -> None:
        self.placement.pipes.send_quietly(message, ranks)

    def live_ranks(self) -> list[int]:
        return [h.spec.rank for h in self.supervisor.handles if h.exit_code is None]

    def exited_ranks(self) -> list[int]:
        return [h.spec.rank for h in self.supervisor.handles if h.exit_code is not None]

    def pump(self, timeout: float) -> None:
        self.supervisor.pump(timeout)

    def _mark_running(self, state: Fate) -> None:
        for fate in self.fates.values():
            if fate.state == Fate.RUNNING:
                fate.state, fate.when = state, time.time()

    def _on_message(self, message: WorkerMessage) -> None:
        fate = self.fates[message.rank]
        if isinstance(message, Location):
            self.watch.on_location(message)
        elif isinstance(message, Notice):
            if self.on_event is not None:
                self.on_event(message.event)
        elif isinstance(message, Reply) and message.reply.error is None:
            assert message.reply.value is not None  # a reply without an error has a value
            self.results[message.rank] = message.reply.value
            fate.state = Fate.RETURNED
            self._announce(fate)
        elif isinstance(message, Reply | Crash):
            error = message.reply.error if isinstance(message, Reply) else message.error
            assert error is not None
            fate.state, fate.error, fate.when = Fate.RAISED, error, error.when
            self._announce(fate)

    def _announce(self, fate: RankFate) -> None:
        if self.on_event is not None:
            self.on_event(RankStateEvent.of(fate.rank, fate.state, self.attempt))

    def _settle(self, handle: WorkerLink) -> None:
        fate = self.fates[handle.spec.rank]
        fate.exit_code = handle.exit_code
        if fate.state not in (Fate.RUNNING, Fate.TIMED_OUT, Fate.STALLED):
            return
        code = handle.exit_code or 0
        if self._stopped_by_us(code):
            fate.state = Fate.STOPPED if fate.state == Fate.RUNNING else fate.state
            self._announce(fate)
            return
        fate.state, fate.when = ended_fate(code), time.time()
        fate.collective = self.placement.collective_of(fate.rank)
        self._announce(fate)

    def _stopped_by_us(self, code: int) -> bool:
        """True when an exit code is what the launcher's own stop signals produce; an exit of
        the rank's own making (``os._exit(3)``, a crash) stays the rank's failure."""
        if self._stop_at is None:
            return False
        return code == -int(signal.SIGTERM) or (code == -int(signal.SIGKILL) and self._killed)

    def _begin_stop(self, now: float, ask_where: bool = False) -> None:
        """Stop every rank; ``ask_where``: first ask the ranks still running where they are,
        and say what their answers (and the failed ranks' errors) show went wrong."""
        if ask_where:
            self._explain = True
            if any(self.fates[r].state == Fate.RUNNING for r in self.live_ranks()):
                self.where = self.watch.where(timeout=2.0)
            now = time.monotonic()
        self._stop_at = now
        self.supervisor.signal(signal.SIGTERM)
