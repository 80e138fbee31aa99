"""Argument checks shared by the public entry points: errors that name the argument."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["check_bool", "check_instance", "check_number", "check_path", "is_int", "is_number"]


def is_int(value: Any) -> bool:
    """A plain int: the one rule for counts, sizes, ranks and seeds. Python's bools are ints,
    but ``True`` passed as a count is a mistake, so it is refused everywhere."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An int or a float, not a bool (the same rule for seconds, scales and factors)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_bool(name: str, value: Any, allow_none: bool = False) -> None:
    """Raise ``TypeError`` unless ``value`` is True or False (or None when allowed)."""
    if value is None and allow_none:
        return
    if not isinstance(value, bool):
        allowed = "True, False or None" if allow_none else "True or False"
        raise TypeError(f"{name} must be {allowed}, got {type(value).__name__} ({value!r}).")


def check_instance(name: str, value: Any, kind: type | tuple[type, ...], what: str) -> None:
    """Raise ``TypeError`` unless ``value`` is None or an instance of ``kind`` (``what``)."""
    if value is not None and not isinstance(value, kind):
        raise TypeError(f"{name} must be {what} or None, got {type(value).__name__} ({value!r}).")


def check_number(name: str, value: Any) -> float:
    """Raise ``TypeError`` unless ``value`` is an int or a float (not a bool)."""
    if not is_number(value):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} ({value!r}).")
    return float(value)


def check_path(name: str, value: Any, allow_none: bool = True) -> Path | None:
    """Raise ``TypeError`` unless ``value`` is a path (str or ``os.PathLike``) or None."""
    if value is None and allow_none:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(
            f"{name} must be a path (str or pathlib.Path), got {type(value).__name__} ({value!r})."
        )
    return Path(value)
