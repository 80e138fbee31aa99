"""The agent's measure of its ranks' memory: one ``Usage`` frame every few seconds.

A pid of another machine means nothing to the notebook, so each host's agent measures its
own ranks (``environment.memory``, as the dashboard measures the notebook's machine) and
sends the figures; the notebook's side keeps only the latest (``parent/hostusage.py``).
"""

from __future__ import annotations

import time

from ...environment import gpu_memory, process_rss
from .wire import Usage

__all__ = ["USAGE_EVERY_S", "UsageClock"]

USAGE_EVERY_S = 2.0


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
