"""How much memory a process holds: the one reader the dashboard and the pool's status share."""

from __future__ import annotations

import psutil

__all__ = ["process_rss"]


def process_rss(pid: int | None) -> int | None:
    """Resident memory of ``pid`` in bytes, or None when there is no such process."""
    if pid is None:
        return None
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except (psutil.Error, OSError):
        return None
