"""``get_logger``: a logger whose calls print once (main process) or on every rank in order."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import MutableMapping
from typing import Any

from .environment import log_level_requested
from .state import PartialState
from .state.registry import STATE

__all__ = ["MultiProcessAdapter", "get_logger"]


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


class MultiProcessAdapter(logging.LoggerAdapter):
    """A ``LoggerAdapter`` for distributed runs.

    Every logging call accepts two extra keyword arguments (and ``stacklevel``, counted as
    Accelerate counts it: 2, the default, names the line that called the logger; a wrapper
    that logs on a user's behalf passes 3):

    - ``main_process_only`` (default True): log on the main process only.
    - ``in_order`` (default False): log on every process, one process after the other in
      rank order (a barrier between turns); implies ``main_process_only=False``.
    """

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        return msg, kwargs

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        """Log ``msg`` at ``level`` on the processes that ``main_process_only`` /
        ``in_order`` select."""
        main_process_only = kwargs.pop("main_process_only", True)
        in_order = kwargs.pop("in_order", False)
        # ``stacklevel`` counts as in Accelerate, where 1 is the adapter's log() and 2 (the
        # default) its caller; one more frame here for _emit().
        kwargs["stacklevel"] = kwargs.get("stacklevel", 2) + 1
        process = STATE.process
        if process is None:
            raise RuntimeError(
                "nbaccel's logger needs the process state: create `Accelerator()` or "
                "`PartialState()` before logging (inside the launched function)."
            )
        if not self.isEnabledFor(level):
            return
        if in_order:
            state = PartialState()
            for index in range(state.num_processes):
                if index == state.process_index:
                    self._emit(level, msg, args, kwargs)
                    _flush()
                state.wait_for_everyone()
        elif not main_process_only or process.process_index == 0:
            self._emit(level, msg, args, kwargs)

    def _emit(self, level: int, msg: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        msg, kwargs = self.process(msg, dict(kwargs))
        self.logger.log(level, msg, *args, **kwargs)

    @functools.lru_cache(None)  # noqa: B019  (one warning per message for the logger's life)
    def warning_once(self, *args: Any, **kwargs: Any) -> None:
        """``warning`` that prints each distinct message once."""
        kwargs["stacklevel"] = kwargs.get("stacklevel", 2) + 1  # names warning_once's caller
        self.warning(*args, **kwargs)


def get_logger(name: str, log_level: str | int | None = None) -> MultiProcessAdapter:
    """A logger for distributed runs; see :class:`MultiProcessAdapter`.

    Args:
        name: the logger's name (usually ``__name__``).
        log_level: level for this logger and the root logger; default from
            ``NBACCEL_LOG_LEVEL`` / ``ACCELERATE_LOG_LEVEL``, else unchanged.

    Example:
        >>> logger = get_logger(__name__, log_level="INFO")
        >>> logger.info("once")                     # main process only
        >>> logger.info("each rank", in_order=True)  # every rank, rank 0 first
    """
    if log_level is None:
        log_level = log_level_requested()
    logger = logging.getLogger(name)
    if log_level is not None:
        level = log_level.upper() if isinstance(log_level, str) else log_level
        logger.setLevel(level)
        logging.getLogger().setLevel(level)
    return MultiProcessAdapter(logger, {})
