"""What a WorkerPool knows of each rank between tasks: pid, device, the cell it runs, its fate
when the pool broke; the rows of ``WorkerPool.status()``; and the values a call's replies carry."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import cloudpickle

from ...environment import process_rss
from ...validation import is_int
from ..protocol import TaskReply
from ..states import PoolState, TaskState
from .errors import RankFate

__all__ = ["RankBook", "select_ranks", "values_of"]


@dataclasses.dataclass
class RankBook:
    """Per-rank book-keeping of one pool: filled at start, updated by each task."""

    current: dict[int, str] = dataclasses.field(default_factory=dict)  # running now
    last: dict[int, str] = dataclasses.field(default_factory=dict)  # the latest task's label
    devices: dict[int, str] = dataclasses.field(default_factory=dict)
    pids: dict[int, int] = dataclasses.field(default_factory=dict)
    fates: dict[int, TaskState] = dataclasses.field(default_factory=dict)  # broken: dead/stopped
    hosts: dict[int, str] = dataclasses.field(default_factory=dict)  # a pool on hosts=[...]
    remote_rss: dict[int, int] = dataclasses.field(default_factory=dict)  # by its host's agent

    def broken(self, fates: list[RankFate]) -> dict[int, TaskState]:
        """Note how each rank of a generation that broke ended: dead, or stopped with it."""
        self.fates = {f.rank: TaskState.DEAD if f.failed else TaskState.STOPPED for f in fates}
        return self.fates

    def rank_state(self, rank: int, pool_state: PoolState) -> str:
        """``idle``/``running`` in a live pool; ``dead``/``stopped`` in a broken one."""
        if pool_state in (PoolState.CLOSED, PoolState.STARTING):
            return str(pool_state)
        if pool_state == PoolState.BROKEN:
            return str(self.fates.get(rank, TaskState.DEAD))
        return str(TaskState.RUNNING if rank in self.current else TaskState.IDLE)

    def _rss(self, rank: int, pid: int | None) -> int | None:
        return self.remote_rss.get(rank) if self.hosts else process_rss(pid)

    def rows(self, num_processes: int, pool_state: PoolState, problem: str) -> list[dict[str, Any]]:
        """The rows of ``WorkerPool.status()`` (on ``hosts=``, each row names its ``host``,
        ``pid`` is the pid there, and ``rss`` is what the host's agent measured last)."""
        live = pool_state in (PoolState.READY, PoolState.RUNNING)
        rows = []
        for rank in range(num_processes):
            pid = self.pids.get(rank) if live or pool_state == PoolState.BROKEN else None
            row: dict[str, Any] = {
                "rank": rank,
                "pid": pid,
                "state": self.rank_state(rank, pool_state),
                "cell": self.current.get(rank),
                "last_cell": self.last.get(rank),
                "rss": self._rss(rank, pid) if live else None,
                "device": self.devices.get(rank),
            }
            if self.hosts:
                row["host"] = self.hosts.get(rank)
            if pool_state == PoolState.BROKEN:
                row["error"] = problem
            rows.append(row)
        return rows


def select_ranks(ranks: int | Iterable[int] | None, num_processes: int) -> list[int]:
    """The ranks a pool call names (``None``: all), sorted, each once; ``ValueError`` before
    anything is sent when one is not a rank of the pool."""
    if ranks is None:
        return list(range(num_processes))
    chosen: list[Any] = [ranks] if isinstance(ranks, int) else list(ranks)
    bad = [r for r in chosen if not is_int(r) or not 0 <= r < num_processes]
    if bad or not chosen:
        raise ValueError(
            f"ranks={ranks!r} is not allowed: name ranks between 0 and "
            f"{num_processes - 1} (an int or a list of ints), or None for all."
        )
    return sorted(set(chosen))


def values_of(replies: dict[int, TaskReply]) -> list[Any]:
    """The values of a call's replies, in rank order (none of them carries an error)."""
    return [cloudpickle.loads(replies[r].value or b"") for r in sorted(replies)]
