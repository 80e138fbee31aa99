"""Accelerate's environment helpers: patch or clear ``os.environ`` for a block, read flags."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import platform
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from packaging.version import Version

from ._vars import _FALSE, _TRUE

__all__ = [
    "check_os_kernel",
    "clear_environment",
    "convert_dict_to_env_variables",
    "get_int_from_env",
    "parallelism_config_defaults",
    "parse_choice_from_env",
    "parse_flag_from_env",
    "patch_environment",
    "purge_accelerate_environment",
    "str_to_bool",
]

F = TypeVar("F")
_FORBIDDEN = (";", "\n", "<", ">", " ")
_MIN_KERNEL = "5.5.0"
# Accelerate's name for the logger of these functions: code that captures or silences their
# warnings by logger name (logging config, assertLogs, caplog) keeps working after the swap.
ACCELERATE_LOGGER_NAME = "accelerate.utils.environment"
_LOGGER = logging.getLogger(ACCELERATE_LOGGER_NAME)


def _put_environment(values: Mapping[str, str | None]) -> None:
    """Set each variable to its value, or remove it where the value is None."""
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@contextlib.contextmanager
def temporary_environment(changes: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or, for None values, remove) variables, and put back exactly what was there.

    Used where the launched processes inherit the launcher's environment (the TPU spawn,
    torch's elastic agent) and for the one process that runs in the kernel itself.
    """
    saved = {key: os.environ.get(key) for key in changes}
    try:
        _put_environment(changes)
        yield
    finally:
        _put_environment(saved)


@contextlib.contextmanager
def patch_environment(**kwargs: Any) -> Iterator[None]:
    """Context: set each keyword (name upper-cased, value as ``str``) in ``os.environ``; on
    exit restore the previous values and remove the names that were not set before."""
    with temporary_environment({key.upper(): str(value) for key, value in kwargs.items()}):
        yield


@contextlib.contextmanager
def clear_environment() -> Iterator[None]:
    """Context: ``os.environ`` is empty inside; on exit it is exactly what it was before."""
    saved = dict(os.environ)
    os.environ.clear()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _accelerate_variables_restored(prefix: str = "ACCELERATE_") -> Iterator[None]:
    before = {k: v for k, v in os.environ.items() if k.startswith(prefix)}
    try:
        yield
    finally:
        for key in [k for k in os.environ if k.startswith(prefix)]:
            if key not in before:
                del os.environ[key]
        os.environ.update(before)


def _purged(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _accelerate_variables_restored():
            return function(*args, **kwargs)

    wrapper._accelerate_is_purged_environment_wrapped = True  # type: ignore[attr-defined]
    return wrapper


def _purge_test_methods(cls: type) -> type:
    for name in dir(cls):
        method = getattr(cls, name)
        done = getattr(method, "_accelerate_is_purged_environment_wrapped", False)
        if name.startswith("test") and callable(method) and not done:
            setattr(cls, name, _purged(method))
    return cls


def purge_accelerate_environment(func_or_cls: F) -> F:
    """Decorator: ``ACCELERATE_*`` variables set while the function (or each ``test*`` method
    of the class and of its subclasses) runs are removed afterwards; earlier values return."""
    if not isinstance(func_or_cls, type):
        return _purged(func_or_cls)  # type: ignore[arg-type, return-value]
    _purge_test_methods(func_or_cls)
    func_or_cls.__init_subclass__ = classmethod(  # type: ignore[assignment]
        lambda cls, **kw: _purge_test_methods(cls)
    )
    return func_or_cls


def convert_dict_to_env_variables(current_env: dict[str, str]) -> list[str]:
    """``["KEY=value\\n", ...]`` for the items safe to write to an environment file; items
    with an empty key or value, or with ``; < >``, a space or a newline, are left out with a
    logged warning."""
    lines = []
    for key, value in current_env.items():
        text = key + value
        if key and value and not any(c in text for c in _FORBIDDEN):
            lines.append(f"{key}={value}\n")
        else:
            _LOGGER.warning(
                "Skipping %s=%s: an empty key or value, or a forbidden character (one of %s).",
                key,
                value,
                list(_FORBIDDEN),
            )
    return lines


def str_to_bool(value: str, to_bool: bool = False) -> int | bool:
    """``1`` for y/yes/t/true/on/1, ``0`` for n/no/f/false/off/0 (bools with ``to_bool``)."""
    lowered = value.lower()
    if lowered in _TRUE | {"t"}:
        result = 1
    elif lowered in (_FALSE - {""}) | {"f"}:
        result = 0
    else:
        raise ValueError(f"invalid truth value {value!r}; use yes/no, true/false, on/off or 1/0.")
    return bool(result) if to_bool else result


def get_int_from_env(env_keys: list[str], default: int) -> int:
    """The first of ``env_keys`` set to a non-negative int, else ``default``."""
    for key in env_keys:
        value = int(os.environ.get(key, -1))
        if value >= 0:
            return value
    return default


def parse_flag_from_env(key: str, default: bool = False) -> bool:
    """The truth value of variable ``key`` (``default`` when it is not set)."""
    return bool(str_to_bool(os.environ.get(key, str(default)), to_bool=True))


def parse_choice_from_env(key: str, default: str = "no") -> str:
    """Variable ``key``'s value, or ``default`` when it is not set."""
    return os.environ.get(key, str(default))


def check_os_kernel() -> None:
    """Warn on Linux kernels older than 5.5, on which distributed jobs can hang."""
    info = platform.uname()
    if info.system != "Linux":
        return
    found = re.search(r"\d+\.\d+\.\d+", info.release)
    if found and Version(found.group(0)) < Version(_MIN_KERNEL):
        _LOGGER.warning(
            f"Detected kernel version {found.group(0)}, below the recommended minimum of "
            f"{_MIN_KERNEL}; this can make processes hang. Upgrade the kernel."
        )


def parallelism_config_defaults() -> dict[str, str]:
    """The ``PARALLELISM_CONFIG_*`` variables a launcher set (``ParallelismConfig``'s
    defaults), keyed by field name: ``{"dp_shard_size": "2", ...}``."""
    prefix = "PARALLELISM_CONFIG_"
    return {k[len(prefix) :].lower(): v for k, v in os.environ.items() if k.startswith(prefix)}
