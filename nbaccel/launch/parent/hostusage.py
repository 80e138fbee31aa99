"""The memory of the ranks on other machines (``hosts=``).

The notebook measures its own machine's ranks by pid (``environment.memory``); a pid of
another machine means nothing here. So each host's agent measures its own ranks the same way
every few seconds and sends one :class:`~nbaccel.launch.parent.hostwire.Usage` frame; the
notebook's reader of that agent keeps only the latest (``AgentLink.memory``: nothing queues up
while a pool sits idle between calls). While a launch or a pool call runs, a
:class:`MemoryTicker` turns the latest figures into one
:class:`~nbaccel.launch.events.MemoryEvent` per rank, on the thread that hands on every other
event (the dashboard shows them; ``on_event`` receives them); ``WorkerPool.status()`` reads
them directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from ...environment import gpu_memory, process_rss
from ..events import MemoryEvent
from .hostwire import Usage

__all__ = ["USAGE_EVERY_S", "MemoryTicker", "UsageClock", "latest"]

USAGE_EVERY_S = 2.0


class _Measured(Protocol):
    memory: dict[int, tuple[int, int | None]]


class UsageClock:
    """The agent's side: says when its ranks' memory is due again, and measures it then."""

    def __init__(self, gpus: int, every: float = USAGE_EVERY_S) -> None:
        self.gpus = gpus
        self.every = every
        self.last = 0.0

    def due(self) -> bool:
        return time.monotonic() - self.last >= self.every

    def measure(self, pids: dict[int, int]) -> Usage:
        """The frame for the ranks in ``pids`` (rank -> pid) still there."""
        self.last = time.monotonic()
        gpu = gpu_memory(pids.values()) if self.gpus else {}
        rss = {rank: process_rss(pid) for rank, pid in pids.items()}
        return Usage(
            rss={str(rank): size for rank, size in rss.items() if size is not None},
            gpu={str(rank): gpu[pid] for rank, pid in pids.items() if pid in gpu},
        )


def latest(agents: Iterable[_Measured]) -> dict[int, tuple[int, int | None]]:
    """Rank -> (RSS, GPU memory) as the agents measured it last."""
    out: dict[int, tuple[int, int | None]] = {}
    for agent in agents:
        out.update(agent.memory)
    return out


class MemoryTicker:
    """The notebook's side: every ``every`` s, one ``MemoryEvent`` per remote rank."""

    def __init__(
        self,
        agents: Callable[[], Iterable[_Measured]],
        on_event: Callable[[Any], None] | None,
        every: float = USAGE_EVERY_S,
    ) -> None:
        self.agents = agents
        self.on_event = on_event
        self.every = every
        self.last = 0.0

    def tick(self) -> None:
        """Hand on the latest figures when they are due (called before each wait)."""
        now = time.monotonic()
        if self.on_event is None or now - self.last < self.every:
            return
        self.last = now
        for rank, (rss, gpu) in sorted(latest(self.agents()).items()):
            self.on_event(MemoryEvent(rank=rank, rss=rss, gpu_memory=gpu))
