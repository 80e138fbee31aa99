"""A worker pool's life: its group of processes started, noticed dead, broken, restarted and
closed; the pool's state and the events that tell the dashboard and the user about it.

:class:`~nbaccel.launch.parent.pool.WorkerPool` owns one :class:`PoolLife` and runs its calls
on the group this keeps.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

from ..config import LaunchConfig
from ..events import Event, EventSink, PoolStateEvent, TaskEvent
from ..guard import StartMethod
from ..states import PoolState, TaskState
from .dashboards import Board, StopFlag
from .poolerrors import (
    RESTARTED,
    PoolBrokenError,
    PoolClosedError,
    RankDied,
    broken_problem,
    quiet,
    restart_failed,
)
from .poolgroup import PoolGroup, close_groups_quietly, weak_forward
from .poolstatus import RankBook

__all__ = ["PoolLife", "finalize_with"]


class PoolLife:
    """The current group of a pool (one generation at a time) and the pool's state.

    ``state`` is ``starting``, ``ready``, ``running``, ``broken``, ``restarting`` or
    ``closed``; ``problem`` says why the pool is broken. Events go to the dashboard (when
    ``board`` is given) and to ``on_event``.
    """

    def __init__(
        self,
        config: LaunchConfig,
        method: StartMethod,
        start_timeout: float,
        grace_period: float,
        board: Board | None,
        on_event: EventSink | None,
    ) -> None:
        self.config = config
        self.method = method
        self.start_timeout = start_timeout
        self.grace_period = grace_period
        self.board = board
        self.on_event = on_event
        self.group: PoolGroup | None = None
        self.holder: list[PoolGroup] = []  # what the owner's finaliser stops if it is dropped
        self.generation = -1
        self.state = PoolState.STARTING
        self.problem = ""
        self.book = RankBook()
        if config.hosts is not None:
            ranks = range(config.world_size)
            self.book.hosts = {r: config.hosts.host_of(r, config.num_processes) for r in ranks}

    def start(self) -> None:
        """Start a new generation of workers; on failure the pool is broken and the error raised."""
        self.generation += 1
        self.state, self.problem = PoolState.STARTING, ""
        on_event = weak_forward(self)  # the group must not keep a dropped pool alive
        line_sink = None
        if self.board is not None:
            on_event = self.board.dashboard.chain(on_event)
            line_sink = self.board.line_sink
        group = PoolGroup(self.config, self.method, self.generation, on_event, line_sink)
        self.holder[:] = [group]
        try:
            group.start(self.start_timeout)
        except RankDied as died:
            self.close_group()
            self.state = PoolState.BROKEN
            self.problem = f"the pool's workers failed to start: {died.error}"
            raise quiet(died.error)  # noqa: B904 - its cause is the rank's WorkerError
        except BaseException:
            self.close_group()
            self.state = PoolState.BROKEN
            self.problem = "the pool's workers failed to start"
            raise
        self.group = group
        self.book.devices = {r: ready.device for r, ready in group.ready.items()}
        self.book.pids = group.pids()
        self.book.current.clear()
        self.state = PoolState.READY
        remote = self.config.hosts is not None  # their pids are another machine's
        if self.board is not None and self.board.set_pids is not None and not remote:
            self.board.set_pids(group.pids())
        self.emit(PoolStateEvent(rank=-1, state=PoolState.READY))
        for rank in range(self.config.world_size):
            self.emit(TaskEvent(rank=rank, state=TaskState.IDLE))

    def close_group(self, grace: float | None = None) -> None:
        """Stop the current group's workers (``grace``: default the pool's, at most 3 s)."""
        group, self.group = self.group, None
        if group is None and self.holder:
            group = self.holder[0]
        self.holder.clear()
        if group is not None:
            group.close(grace=min(self.grace_period, 3.0) if grace is None else grace)

    def close(self) -> None:
        """Stop the workers for good (idempotent)."""
        if self.state == PoolState.CLOSED:
            return
        self.close_group()
        self.state = PoolState.CLOSED
        self.emit(PoolStateEvent(rank=-1, state=PoolState.CLOSED))
        if self.board is not None:
            with contextlib.suppress(Exception):
                self.board.dashboard.end(None)

    def notice_death(self) -> None:
        """A rank that died between calls leaves the pool broken."""
        if self.group is None or self.state != PoolState.READY:
            return
        try:
            self.group.check_alive()
        except RankDied as died:
            self.break_down(died)

    def break_down(self, died: RankDied) -> None:
        """A rank died: stop the others; the pool is broken until restarted."""
        self.problem = broken_problem(died.error)
        self.close_group()
        self.state = PoolState.BROKEN
        for rank, state in self.book.broken(died.fates).items():
            self.emit(TaskEvent(rank=rank, state=state))
        self.emit(PoolStateEvent(rank=-1, state=PoolState.BROKEN, message=self.problem))

    def usable(self) -> PoolGroup:
        """The group a call runs on, or the error that says why there is none."""
        self.notice_death()
        if self.state == PoolState.CLOSED:
            raise PoolClosedError("the pool was shut down; create a new WorkerPool.")
        if self.state == PoolState.BROKEN or self.group is None:
            raise PoolBrokenError(self.problem or "the pool is broken; call pool.restart().")
        return self.group

    def restart_after(self, reason: str) -> str:
        """Restart the group; the sentence that tells the user what was lost."""
        self.emit(PoolStateEvent(rank=-1, state=PoolState.RESTARTING, message=reason))
        self.close_group(grace=0.2)  # stuck ranks would not leave by themselves
        try:
            self.start()
        except BaseException as exc:
            return restart_failed(exc)
        return RESTARTED

    def rows(self) -> list[dict[str, Any]]:
        """``WorkerPool.status()``: one dict per rank."""
        self.book.remote_rss = self.group.memory_elsewhere() if self.group is not None else {}
        return self.book.rows(self.config.world_size, self.state, self.problem)

    def begin_call(self, task: Any, ranks: list[int]) -> StopFlag | None:
        """A call starts on ``ranks``: noted and told; the dashboard's Stop flag, cleared."""
        for rank in ranks:
            self.book.current[rank] = self.book.last[rank] = task.label
            self.emit(
                TaskEvent(
                    rank=rank, state=TaskState.RUNNING, label=task.label, task_id=task.task_id
                )
            )
        self.state = PoolState.RUNNING
        stop = self.board.stop_requested if self.board is not None else None
        if stop is not None:
            stop.clear()  # a click between calls does not stop this one
        return stop

    def end_call(self) -> None:
        """The call ended, however it ended."""
        self.book.current.clear()
        if self.state == PoolState.RUNNING:
            self.state = PoolState.READY
        if self.board is not None and self.board.release_messages is not None:
            self.board.release_messages()  # a cell queued during the call runs next

    def emit(self, event: Event) -> None:
        """Tell the dashboard and the user."""
        if self.board is not None:
            with contextlib.suppress(Exception):
                self.board.dashboard.chain(None)(event)
        self._tell_user(event)

    def from_group(self, event: Event) -> None:
        """An event of the group's ranks (the dashboard had it first)."""
        self._tell_user(event)

    def _tell_user(self, event: Event) -> None:
        if self.on_event is not None:
            self.on_event(event)


def finalize_with(owner: object, life: PoolLife) -> weakref.finalize:
    """Stop ``life``'s workers when ``owner`` is dropped without being shut down."""
    return weakref.finalize(owner, close_groups_quietly, life.holder)
