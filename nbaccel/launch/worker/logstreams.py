"""In a worker, logging handlers that write to the kernel's streams write to the relay instead.

A handler made in the kernel before the launch (``logging.basicConfig()``, Transformers' own
handler) holds the kernel's ``sys.stderr``: in a forked worker, writing or flushing through it
would send from the fork (dropped, with a warning in the kernel's log) or bypass the rank
prefix. :func:`retarget_log_handlers` points every such handler at the worker's new streams,
which lead into the output relay (whole lines, rank prefix).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["retarget_log_handlers"]


def _handlers() -> Iterator[logging.Handler]:
    seen: set[int] = set()
    loggers: list[Any] = [logging.getLogger()]
    loggers += list(logging.Logger.manager.loggerDict.values())
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):  # PlaceHolders have none
            if id(handler) not in seen:
                seen.add(id(handler))
                yield handler


def _replacement(stream: Any, streams: Mapping[int, Any], by_name: Mapping[str, Any]) -> Any:
    """The worker's stream for ``stream`` if it is one of the kernel's, else None."""
    found = streams.get(id(stream))
    if found is not None:
        return found
    # ipykernel's OutStream objects that were sys.stdout/sys.stderr before the kernel swapped
    # them (each cell may get new ones) are the kernel's streams too
    if type(stream).__name__ == "OutStream" and type(stream).__module__.startswith("ipykernel"):
        return by_name.get(getattr(stream, "name", ""))
    return None


def retarget_log_handlers(old_to_new: Mapping[Any, Any], stdout: Any, stderr: Any) -> int:
    """Point every logging handler that writes to an old stream at its new one.

    Args:
        old_to_new: each stream the worker replaced (the kernel's ``sys.stdout``,
            ``sys.__stderr__``, ...) -> the stream that replaces it.
        stdout: the worker's new stdout (for kernel streams named ``stdout``).
        stderr: the worker's new stderr.

    Returns:
        How many handlers were changed.
    """
    streams: dict[int, Any] = {id(old): new for old, new in old_to_new.items()}
    by_name = {"stdout": stdout, "stderr": stderr}
    changed = 0
    for handler in _handlers():
        if not isinstance(handler, logging.StreamHandler):
            continue
        target = _replacement(handler.stream, streams, by_name)
        if target is not None:
            # not setStream(): it would flush the kernel's stream first, from this process
            handler.stream = target
            changed += 1
        # Transformers binds its handler's flush to the stream's flush when it makes it
        flush = vars(handler).get("flush")
        owner = getattr(flush, "__self__", None)
        flush_target = _replacement(owner, streams, by_name) if owner is not None else None
        if flush_target is not None:
            handler.flush = flush_target.flush  # type: ignore[method-assign]
            changed += target is None
    return changed
