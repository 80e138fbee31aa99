"""What the launch dashboard shows, fed by the launcher's events, output lines and pids."""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..environment import gpu_memory, process_rss
from ..launch.events import (
    EngineEvent,
    Event,
    EventSink,
    MemoryEvent,
    MetricsEvent,
    ProgressEvent,
    RankStateEvent,
    TaskEvent,
)
from ..launch.parent.errors import LaunchStopped
from ..launch.states import Fate, RankState, TaskState
from .memory import format_bytes

__all__ = ["DashboardState", "RankView", "engine_label"]

MAX_LINES = 400
# tqdm's text bar: "desc:  45%|####      | 45/100 [00:01<00:02, 30.1it/s]"
_TQDM = re.compile(r"^(?:(?P<desc>.*?): )?\s*\d+%\|.*\|\s*(?P<n>\d+)/(?P<total>\d+) \[")
# how the dashboard words a launched rank's state
_STATES = {
    RankState.RUNNING: "running",
    RankState.RETURNED: "finished",
    RankState.FAILED: "failed",
    RankState.STOPPED: "stopped",
}


def engine_label(engine: str, stage: int | None) -> str:
    """How the dashboard names a rank's training engine: ``DeepSpeed ZeRO-3``."""
    if engine.lower() == "deepspeed":
        return "DeepSpeed" if stage is None else f"DeepSpeed ZeRO-{stage}"
    return engine if stage is None else f"{engine} stage {stage}"


@dataclass
class RankView:
    """One rank as the dashboard shows it."""

    rank: int
    state: str = "starting"  # starting, running, finished, failed, stopped
    detail: str = ""
    restart_count: int = 0
    pid: int | None = None
    n: int = 0
    total: int | None = None
    desc: str = ""
    rate: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    rss: int | None = None
    gpu_memory: int | None = None
    host: str = ""  # the machine of hosts=[...] the rank runs on ("" on this one)
    engine: str = ""  # the training engine its Accelerator runs ("DeepSpeed ZeRO-3"), if told
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_LINES))
    last_was_bar: bool = False
    _first: tuple[float, int] | None = None

    def progress(self, n: int, total: int | None, desc: str, now: float) -> None:
        """Record progress; steps per second count from the first report."""
        if self._first is None or n < self._first[1]:
            self._first = (now, n)
        start, n0 = self._first
        if now > start and n > n0:
            self.rate = (n - n0) / (now - start)
        self.n, self.total, self.desc = n, total, desc or self.desc

    def row(self) -> dict[str, str]:
        """The rank's table row, as text."""
        progress = f"{self.n}/{self.total}" if self.total else (str(self.n) if self.n else "-")
        state = self.state + (f" ({self.detail})" if self.detail else "")
        metrics = ", ".join(f"{k}={v:.4g}" for k, v in self.metrics.items())
        return {
            "rank": f"{self.rank} ({self.host})" if self.host else str(self.rank),
            "state": state,
            "pid": str(self.pid or "-"),
            "progress": progress,
            "steps/s": f"{self.rate:.1f}" if self.rate else "-",
            "RSS": format_bytes(self.rss),
            "GPU memory": format_bytes(self.gpu_memory),
            "metrics": metrics or "-",
        }


class DashboardState:
    """Thread-safe state of one launch (events come from the supervisor, lines from the relay).

    Args:
        clock: a monotonic clock (tests pass their own).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.lock = threading.RLock()
        self.stop_requested = threading.Event()
        self.ranks: dict[int, RankView] = {}
        self.first_rank = 0
        self.started: float | None = None
        self.ended: float | None = None
        self.outcome = "idle"  # idle, running, finished, failed, stopped
        self.error = ""
        self.machines = ""  # multi-node: which machine this is, where the others report
        self.main_bar: tuple[int, int | None, str] | None = None
        self._bar_from_tqdm = False

    # -- launcher hooks ------------------------------------------------------------------------
    def begin(self, num_processes: int, first_rank: int = 0) -> None:
        """A launch of ``num_processes`` local ranks starts (global ranks from ``first_rank``)."""
        with self.lock:
            self.first_rank = first_rank
            self.ranks = {first_rank + i: RankView(first_rank + i) for i in range(num_processes)}
            self.started, self.ended, self.outcome, self.error = self.clock(), None, "running", ""
            self.main_bar, self._bar_from_tqdm = None, False
            self.machines = ""
            self.stop_requested.clear()

    def handle(self, event: Event) -> None:
        """Take one launcher event (other kinds are ignored)."""
        with self.lock:
            view = self.ranks.get(getattr(event, "rank", -1))
            if view is None:
                return
            if isinstance(event, RankStateEvent):
                if event.restart_count != view.restart_count:
                    view.n, view.total, view.rate, view._first = 0, None, None, None
                view.state = _STATES.get(event.state, str(event.state))
                view.restart_count = event.restart_count
            elif isinstance(event, ProgressEvent):
                view.progress(event.n, event.total, event.desc, self.clock())
                if event.rank == self.first_rank and not self._bar_from_tqdm:
                    self.main_bar = (event.n, event.total, event.desc)
            elif isinstance(event, MetricsEvent):
                view.metrics.update(event.values)
            elif isinstance(event, TaskEvent):  # a worker pool's rank: its current cell
                view.state = str(event.state)
                view.detail = event.label if event.state == TaskState.RUNNING else ""
            elif isinstance(event, EngineEvent):  # the rank's Accelerator was created
                view.engine = engine_label(event.engine, event.stage)
            elif isinstance(event, MemoryEvent):  # a rank on another machine (hosts=)
                view.rss = event.rss
                if event.gpu_memory is not None:
                    view.gpu_memory = event.gpu_memory

    def chain(self, on_event: EventSink | None) -> EventSink:
        """An ``on_event`` callback that feeds this state, then calls ``on_event``."""

        def both(event: Event) -> None:
            self.handle(event)
            self.changed()
            if on_event is not None:
                on_event(event)

        return both

    def line_sink(self, local_rank: int, stream: str, line: str) -> None:
        """One output line of a rank (called from the output relay's thread)."""
        with self.lock:
            view = self.ranks.get(self.first_rank + local_rank)
            if view is None:
                return
            match = _TQDM.match(line)
            if match is not None:
                if local_rank == 0:  # the main process's bar is the one bar shown
                    self._bar_from_tqdm = True
                    self.main_bar = (int(match["n"]), int(match["total"]), match["desc"] or "")
                if view.last_was_bar and view.lines:
                    view.lines.pop()  # a bar redraws itself: keep its latest line only
            view.last_was_bar = match is not None
            view.lines.append(line if stream == "stdout" else f"[stderr] {line}")

    def set_pids(self, pids: dict[int, int]) -> None:
        """Global rank -> pid of the workers of the current attempt."""
        with self.lock:
            for rank, pid in pids.items():
                if rank in self.ranks:
                    self.ranks[rank].pid = pid

    def end(self, error: BaseException | None) -> None:
        """The launch is over: ``error`` is what the cell raises (None: every rank returned)."""
        with self.lock:
            self.ended = self.clock()
            fates = _fates(error)
            for fate in fates:
                view = self.ranks.get(fate.rank)
                if view is not None and fate.state != Fate.RETURNED:
                    view.state = "failed" if fate.failed else "stopped"
                    view.detail = fate.describe()
            if error is None:
                self.outcome = "finished"
                for view in self.ranks.values():
                    view.state = "finished"
            elif isinstance(error, KeyboardInterrupt):
                self.outcome = "stopped"
                for view in self.ranks.values():
                    if view.state in ("starting", "running"):
                        view.state = "stopped"
                        view.detail = "Stop button" if isinstance(error, LaunchStopped) else ""
            else:
                self.outcome = "failed"
                first = str(error).splitlines()[0] if str(error) else ""
                self.error = f"{type(error).__name__}: {first}"
        self.sample_memory()
        self.changed()

    # -- for views -----------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the launcher to stop every rank (as an interrupt does)."""
        self.stop_requested.set()

    def changed(self) -> None:
        """Called after every change; views override it to redraw."""

    def sample_memory(self) -> None:
        """Read every live rank's RSS (and GPU memory where there is a GPU)."""
        with self.lock:
            live = {v.pid: v for v in self.ranks.values() if v.pid and v.state != "finished"}
        sizes = {pid: process_rss(pid) for pid in live}
        gpu = gpu_memory(live)
        with self.lock:
            for pid, view in live.items():
                if sizes[pid] is not None:
                    view.rss = sizes[pid]
                if pid in gpu:
                    view.gpu_memory = gpu[pid]

    @property
    def elapsed(self) -> float:
        """Seconds since the launch began (frozen when it ended)."""
        if self.started is None:
            return 0.0
        return (self.ended if self.ended is not None else self.clock()) - self.started

    def headline(self) -> str:
        """One line: outcome, ranks (and the engine they run, once they said) and elapsed time
        (and, on several machines, which)."""
        count = len(self.ranks)
        words = {"running": "Running", "finished": "Finished", "failed": "Failed"}
        word = words.get(self.outcome, self.outcome.capitalize())
        with self.lock:
            engines = " / ".join(dict.fromkeys(v.engine for v in self.ranks.values() if v.engine))
        ranks = f"{count} rank{'s' if count != 1 else ''}" + (f" ({engines})" if engines else "")
        line = f"{word}: {ranks}, {self.elapsed:.1f} s elapsed"
        return f"{line}; {self.machines}" if self.machines else line

    def set_machines(self, node_rank: int, num_nodes: int, per_machine: int, fixed: bool) -> None:
        """A multi-node launch: say which machine's ranks are shown and where the others are
        (``fixed``: node ranks are known before the rendezvous, as with ``static``)."""
        others = [n for n in range(num_nodes) if n != node_rank]
        if not fixed:
            self.machines = (
                f"this machine's ranks are shown here; the ranks of the other {num_nodes - 1} "
                "machine(s) report in their own cells"
            )
            return
        where = ", ".join(
            f"machine {n}'s ranks {n * per_machine}-{(n + 1) * per_machine - 1}" for n in others
        )
        self.machines = (
            f"machine {node_rank} of {num_nodes}; {where} report in their own cell on that machine"
        )

    def set_hosts(self, hosts: dict[int, str]) -> None:
        """A launch on ``hosts=[...]``: the machine of each rank (``{global rank: host}``),
        shown beside the rank and in the headline."""
        with self.lock:
            for rank, host in hosts.items():
                if rank in self.ranks:
                    self.ranks[rank].host = host
            names = list(dict.fromkeys(hosts.values()))
            self.machines = f"on {len(names)} machines: {', '.join(names)}"

    def summary(self) -> str:
        """Several lines: the headline, one per rank, and the error if there was one."""
        with self.lock:
            lines = [self.headline()]
            for view in self.ranks.values():
                row = view.row()
                extra = f", {row['steps/s']} steps/s" if view.rate else ""
                metrics = f", {row['metrics']}" if view.metrics else ""
                lines.append(
                    f"  rank {row['rank']}: {row['state']}, progress {row['progress']}{extra}, "
                    f"RSS {row['RSS']}{metrics}"
                )
            if self.error:
                lines.append(f"  error: {self.error}")
        return "\n".join(lines)


def _fates(error: BaseException | None) -> list[Any]:
    seen = error
    while seen is not None:
        fates = getattr(seen, "fates", None)
        if fates:
            return list(fates)
        seen = seen.__cause__
    return []
