"""The device tests run on, and the decorators that skip a test when its needs are not met.

Every condition is nbaccel's own answer for this machine: the device comes from
:func:`nbaccel.environment.choose_device` (CUDA is counted, never initialised) and the
libraries from the ``is_*_available`` checks of :mod:`nbaccel.utils`. A decorator works on a
test function or on a whole ``unittest.TestCase`` class, and is evaluated when it is applied.
"""

from __future__ import annotations

import unittest
from collections.abc import Callable
from typing import Any

import torch

from ..environment import choose_device, cuda_device_count, read_launch_environment
from ..utils import is_pytest_available, parse_flag_from_env

__all__ = [
    "device_count",
    "memory_allocated_func",
    "requirement",
    "run_first",
    "skip",
    "slow",
    "torch_device",
]


def _backend() -> tuple[str, int, Callable[[], int]]:
    """(device type, number of such devices, a function giving the bytes allocated on them)."""
    kind = choose_device(read_launch_environment()).kind
    if kind == "cuda":
        return "cuda", cuda_device_count(), torch.cuda.memory_allocated
    if kind == "xla":
        return "xla", 1, lambda: 0
    if kind == "mps":
        return "mps", 1, torch.mps.current_allocated_memory
    return "cpu", 1, lambda: 0


torch_device, device_count, memory_allocated_func = _backend()


def requirement(condition: bool | Callable[[], bool], reason: str) -> Callable[[Any], Any]:
    """A decorator that skips the test (function or class) unless ``condition`` holds.

    Args:
        condition: a truth value, or a function asked when the decorator is applied.
        reason: what the test needs, shown as the skip reason ("test requires ...").
    """

    def decorate(test_case: Any) -> Any:
        holds = condition() if callable(condition) else condition
        return unittest.skipUnless(bool(holds), f"test requires {reason}")(test_case)

    decorate.__doc__ = f"Skip the test unless this machine has {reason}."
    return decorate


def skip(test_case: Any) -> Any:
    """Skip the test always."""
    return unittest.skip("test skipped")(test_case)


def slow(test_case: Any) -> Any:
    """Mark a slow test: it runs only when ``RUN_SLOW`` is set to a true value (yes, 1, ...)."""
    run_slow = parse_flag_from_env("RUN_SLOW", default=False)
    return unittest.skipUnless(run_slow, "test is slow (set RUN_SLOW=1 to run it)")(test_case)


def run_first(test_case: Any) -> Any:
    """Ask pytest-order to run the test first (where pytest is installed; else unchanged)."""
    if not is_pytest_available():
        return test_case
    # pytest is there only where tests run
    import pytest

    return pytest.mark.order(1)(test_case)


def _torch_count(name: str) -> int:
    """Devices of torch backend ``name`` (``xpu``...), 0 where torch has no such backend."""
    module = getattr(torch, name, None)
    if module is None or not hasattr(module, "device_count"):
        return 0
    try:
        return int(module.device_count())
    except (RuntimeError, AssertionError):
        return 0
