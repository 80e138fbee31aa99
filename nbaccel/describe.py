"""Readable names and sizes for messages: ``get_pretty_name`` and ``convert_bytes``."""

from __future__ import annotations

from typing import Any

__all__ = ["convert_bytes", "get_pretty_name"]


def get_pretty_name(obj: Any) -> str:
    """A readable name: the qualified name of a function or class, of an object's class."""
    if not hasattr(obj, "__qualname__") and not hasattr(obj, "__name__"):
        obj = getattr(obj, "__class__", obj)
    return str(getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or obj)


def convert_bytes(size: float) -> str:
    """``size`` bytes in the largest fitting unit: ``"1.5 MB"``."""
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if size < 1024.0:
            return f"{round(size, 2)} {unit}"
        size /= 1024.0
    return f"{round(size, 2)} PB"
