"""A worker's own output into the relay's pipes: Python's streams, fds 1 and 2, and C's printf."""

from __future__ import annotations

import io
import os
import sys
from typing import Any

from .logstreams import retarget_log_handlers

__all__ = ["redirect_child_output"]

# Streams replaced by redirect_child_output: kept alive so that their finalisers never close
# the fds 1 and 2 that now lead into the relay's pipes.
_REPLACED_STREAMS: list[Any] = []


def _flush_quietly(stream: object) -> None:
    # Only real file streams: an ipykernel OutStream inherited by a forked child would send
    # the parent's pending text again (or block on a lock held by a parent thread).
    if isinstance(stream, io.TextIOWrapper):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _open_std(fd: int) -> io.TextIOWrapper:
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
        write_through=True,
    )


def redirect_child_output(stdout_fd: int, stderr_fd: int) -> None:
    """Send this process's fds 1 and 2, and ``sys.stdout``/``sys.stderr``, into the pipes.

    Call first thing in a worker process, forked or spawned. Afterwards Python ``print``,
    ``os.write(1, ...)`` and C-level ``printf`` all reach the relay.

    Args:
        stdout_fd: Write end for stdout (closed here unless it is 1 or 2).
        stderr_fd: Write end for stderr (closed here unless it is 1 or 2).
    """
    _flush_quietly(sys.stdout)
    _flush_quietly(sys.stderr)
    os.dup2(stdout_fd, 1)
    os.dup2(stderr_fd, 2)
    for fd in {stdout_fd, stderr_fd} - {1, 2}:
        os.close(fd)
    old = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    _REPLACED_STREAMS.extend(stream for stream in old if stream is not None)
    sys.stdout = _open_std(1)
    sys.stderr = _open_std(2)
    sys.__stdout__ = sys.stdout  # type: ignore[misc]  # typeshed marks these Final
    sys.__stderr__ = sys.stderr  # type: ignore[misc]
    new = (sys.stdout, sys.stderr, sys.stdout, sys.stderr)
    replaced = {o: n for o, n in zip(old, new, strict=True) if o is not None}
    retarget_log_handlers(replaced, sys.stdout, sys.stderr)
