"""How every check script ends: the closing barrier and message, and ``_mp_fn``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["report_passed", "xla_entry"]


def report_passed(state: Any, script: str) -> None:
    """Wait for every process, then print once (``state.print``) that ``script`` passed;
    ``state`` is the script's ``PartialState`` or ``Accelerator``."""
    state.wait_for_everyone()
    state.print(f"{script}: all checks passed")


def xla_entry(main: Callable[[], None]) -> Callable[[int], None]:
    """The ``_mp_fn(index)`` a script exposes for ``xla_spawn``-style launchers, which pass
    the process index: it runs ``main``."""

    def _mp_fn(index: int) -> None:
        main()

    return _mp_fn
