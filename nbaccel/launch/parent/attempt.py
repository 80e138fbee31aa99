"""One attempt of a multi-process launch: rendezvous, start the group, collect the results."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import cloudpickle

from ..config import LaunchConfig
from ..events import EventSink
from ..guard import StartMethod
from ..nodes.meeting import Meeting, meet_machines
from ..nodes.peers import NodeWatch
from ..spec import WorkerMode, WorkerSpec
from ..states import Fate
from .dashboards import StopFlag
from .errors import (
    LaunchStopped,
    LaunchTimeoutError,
    RankFate,
    build_error,
    format_fates,
    root_cause,
)
from .launchgroup import GroupOutcome, LaunchGroup
from .placement import PlaceRequest, RankWork
from .places import place
from .poolerrors import add_note
from .watch import stall_error, where_note

__all__ = ["LaunchPlan"]


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """What to run and how; :meth:`run` carries out one attempt.

    Attributes:
        function: the function every worker runs.
        args: its positional arguments.
        kwargs: its keyword arguments.
        config: the validated launcher settings.
        method: ``"fork"`` or ``"spawn"``.
        on_event: receives worker events in the launcher's process.
        line_sink: also receives every whole output line as ``(local_rank, stream, line)``
            (see :class:`OutputRelay`).
        stop_requested: set it to stop every rank (see :class:`LaunchGroup`).
        on_started: receives ``{global rank: pid}`` once the workers of an attempt started.
        on_wait: called between the supervisor's waits (see :class:`LaunchGroup`).
    """

    function: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    config: LaunchConfig
    method: StartMethod
    on_event: EventSink | None = None
    line_sink: Callable[[int, str, str], None] | None = None
    stop_requested: StopFlag | None = None
    on_started: Callable[[dict[int, int]], None] | None = None
    on_wait: Callable[[], None] | None = None

    def run(self, attempt: int) -> list[Any]:
        """Meet the other machines (if any), run the group, return the local results."""
        config = self.config
        if config.multi_node:
            with meet_machines(config, attempt) as meeting:
                return self._run_group(meeting.config, attempt, meeting)
        return self._run_group(config, attempt, None)

    def _run_group(self, config: LaunchConfig, attempt: int, meeting: Meeting | None) -> list[Any]:
        stop = threading.Event()
        watch = _watch(meeting, attempt, stop) if meeting is not None else None
        work = RankWork(WorkerMode.LAUNCH, self.function, self.args, self.kwargs)
        request = PlaceRequest(config, self.method, attempt, work, self.on_event, self.line_sink)
        try:
            placement = place(request, meeting)
        except BaseException:
            if watch is not None:
                watch.close()
            raise
        try:
            if attempt == 0:
                print(placement.announce("Launching"), flush=True)
            group = LaunchGroup(
                placement,
                config.monitor_interval,
                config.timeout,
                attempt=attempt,
                stop_requested=stop,
                on_started=self.on_started,
                on_wait=lambda: self._on_wait(stop, watch),
                stall_timeout=config.stall_timeout,
                on_stall=config.on_stall,
            )
            placement.start(group.supervisor)
            if watch is not None:
                watch.start()
            try:
                outcome = group.run()
            except LaunchStopped:
                if watch is not None and watch.problem is not None:
                    problem, watch.problem = watch.problem, None
                    watch.release()
                    raise problem from None
                raise
        finally:
            placement.close()
            if watch is not None:
                watch.close()
        lost = placement.lost(outcome.where, outcome.findings)
        if lost is not None:
            raise lost
        try:
            return self._results(outcome, placement.specs, placement.specs[0].rank, watch)
        finally:
            if watch is not None:
                _leave(watch, meeting)

    def _on_wait(self, stop: threading.Event, watch: NodeWatch | None) -> None:
        if watch is not None:
            watch.check()
        if self.on_wait is not None:
            self.on_wait()
        if self.stop_requested is not None and self.stop_requested.is_set():
            stop.set()

    def _results(
        self,
        outcome: GroupOutcome,
        specs: list[WorkerSpec],
        first: int,
        watch: NodeWatch | None = None,
    ) -> list[Any]:
        if outcome.stalled is not None:
            raise stall_error(outcome.stalled, "Every rank was stopped (on_stall='raise').")
        if outcome.timed_out:
            late = [f.rank for f in outcome.fates if f.state == Fate.TIMED_OUT]
            raise LaunchTimeoutError(
                late[0] if late else -1,
                late[0] - first if late else -1,
                "timeout",
                f"rank(s) {late} were still running after timeout={self.config.timeout}s and "
                "were stopped. Raise timeout=, or look for a rank waiting in a collective that "
                "another rank never reached."
                + (
                    f"\n\n{where_note(outcome.where, 'then', outcome.findings)}"
                    if outcome.where or outcome.findings
                    else ""
                ),
                "",
                outcome.fates,
            )
        cause = root_cause(outcome.fates)
        if cause is not None:
            if watch is not None:
                _blame_machine(watch, cause)
            error = build_error(cause, outcome.fates)
            if outcome.where is not None or outcome.findings:
                when = f"when {cause.where} failed"
                add_note(error, where_note(outcome.where, when, outcome.findings))
            raise error
        missing = [s.rank for s in specs if s.rank not in outcome.results]
        if missing:
            table = format_fates(outcome.fates)
            raise RuntimeError(f"rank(s) {missing} ended without a result:\n{table}")
        return [cloudpickle.loads(outcome.results[s.rank]) for s in specs]


def _watch(meeting: Meeting, attempt: int, stop: threading.Event) -> NodeWatch:
    config = meeting.config
    return NodeWatch(
        meeting.store,
        config.node_rank,
        config.num_nodes,
        attempt,
        config.node_timeout,
        meeting.route.address,
        meeting.store_node,
        on_problem=stop.set,
        store_address=meeting.route.peer,
    )


def _leave(watch: NodeWatch, meeting: Meeting | None) -> None:
    """Tell the others this machine is done; the store's host waits for them to read it."""
    watch.announce_left()
    if meeting is not None and meeting.config.node_rank == meeting.store_node:
        watch.linger(min(meeting.config.node_timeout, 15.0))
    watch.release()


def _blame_machine(watch: NodeWatch, cause: RankFate) -> None:
    """Raise another machine's failure when this machine's ranks only saw its symptoms;
    otherwise tell the other machines which rank here failed."""
    symptom = cause.error is None or cause.error.looks_like_peer_loss
    remote = watch.remote_failure(within=5.0 if symptom and watch.alive() else 0.0)
    if symptom and remote is not None:
        raise remote from None
    summary = f"{cause.error.type_name}: {cause.error.message}" if cause.error else cause.describe()
    watch.publish_failure(cause.rank, summary.splitlines()[0] if summary else summary)
