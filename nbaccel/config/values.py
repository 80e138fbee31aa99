"""Value parsers for config files and the errors that name the key, the file and the fix."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from ..validation import is_int

__all__ = [
    "ConfigError",
    "DefaultSeconds",
    "ValueProblem",
    "as_bool",
    "as_choice",
    "as_int",
    "as_mapping",
    "as_port",
    "as_seconds_or_none",
    "as_str",
    "suggest",
]

_TRUE = ("true", "yes", "1", "on", "y")
_FALSE = ("false", "no", "0", "off", "n")


class ConfigError(ValueError):
    """A config file (or a setting for one) is wrong: names the key, the file and the fix."""


class DefaultSeconds(float):
    """A default number of seconds that a launcher argument starts with, told apart (with
    ``is``) from the same number passed on purpose: the config file's value replaces only the
    default, as it replaces a ``None`` elsewhere."""

    def __repr__(self) -> str:
        return float.__repr__(self)


class ValueProblem(ValueError):
    """What is wrong with one value, before the file it came from is known.

    Args:
        problem: what is wrong (``"is not an integer"``).
        key: the key, when known (``fsdp_config.fsdp_version`` for nested keys).
        known: the keys that exist at that level, to suggest the one that was meant.
    """

    def __init__(self, problem: str, key: str | None = None, known: Iterable[str] = ()) -> None:
        super().__init__(problem)
        self.problem = problem
        self.key = key
        self.known = tuple(known)

    def __str__(self) -> str:
        return f"key '{self.key}' {self.problem}" if self.key else self.problem

    def at(self, key: str) -> ValueProblem:
        """The same problem, attributed to ``key`` (prefixed when nested)."""
        full = key if self.key is None else f"{key}.{self.key}"
        return ValueProblem(self.problem, full, self.known)

    def error(self, source: str) -> ConfigError:
        """A :class:`ConfigError` naming the key, ``source`` (a path) and a likely fix."""
        key = self.key or "?"
        message = f"{source}: key '{key}' {self.problem}."
        leaf = key.rsplit(".", 1)[-1]
        meant = suggest(leaf, self.known) if self.known else None
        if meant is not None:
            prefix = key.rsplit(".", 1)[0] + "." if "." in key else ""
            message += f" Did you mean '{prefix}{meant}'?"
        elif self.known:
            message += " Known keys: " + ", ".join(sorted(self.known)) + "."
        return ConfigError(message)


def suggest(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to ``name`` (a likely typo), or None."""
    matches = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
    return matches[0] if matches else None


def as_bool(value: Any) -> bool:
    """True/False, or the strings Accelerate writes (``"yes"``, ``"no"``, ``"true"``...)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ValueProblem(f"has the value {value!r}, which is not true/false (or yes/no)")


def as_int(value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer within the bounds (a string of digits is accepted)."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value.strip())
    if not is_int(value):
        raise ValueProblem(f"has the value {value!r}, which is not an integer")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise ValueProblem(f"has the value {value}, but it must be {bound}")
    return value


def as_port(value: Any) -> int:
    """A TCP port, 1-65535."""
    return as_int(value, 1, 65535)


def as_seconds_or_none(value: Any) -> float | None:
    """A positive number of seconds, or None (``null``, ``none`` or ``off`` in a file)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "off")):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ValueProblem(f"has the value {value!r}, which is not a number") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueProblem(f"has the value {value!r}; use a positive number of seconds or null")
    return float(value)


def as_str(value: Any) -> str:
    """A string (numbers are accepted and turned into text)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueProblem(f"has the value {value!r}, which is not a string")
    return str(value)


def as_mapping(value: Any) -> dict[Any, Any]:
    """A mapping, as a plain dict copy."""
    if not isinstance(value, Mapping):
        raise ValueProblem(f"has the value {value!r}, which is not a mapping")
    return dict(value)


def as_choice(value: Any, allowed: tuple[str, ...]) -> str:
    """One of ``allowed`` (case-insensitive); returned in the spelling of ``allowed``."""
    if isinstance(value, str):
        for option in allowed:
            if value.strip().lower() == option.lower():
                return option
    text = f"has the value {value!r}; allowed: {', '.join(allowed)}"
    raise ValueProblem(text)
