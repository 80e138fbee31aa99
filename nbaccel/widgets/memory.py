"""Memory sizes as the dashboard writes them (measured by ``environment.memory``)."""

from __future__ import annotations

__all__ = ["format_bytes"]


def format_bytes(size: int | None) -> str:
    """``"1.2 GiB"``-style text, ``"-"`` for None."""
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"  # pragma: no cover
