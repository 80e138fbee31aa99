"""A save stopped by SIGTERM cleans up first: how the launcher stops a worker (a kernel
interrupt, a failed peer) must not leave a staging directory behind."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["terminated_cleanly"]


class _Terminated(BaseException):
    """SIGTERM arrived while a save was running (raised to unwind its clean-up)."""


def _raise(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the clean-up
    raise _Terminated


@contextlib.contextmanager
def terminated_cleanly() -> Iterator[None]:
    """While the block runs, SIGTERM raises inside it, so that its ``except``/``finally``
    clauses run (the save removes its staging directory); the process then dies of SIGTERM
    exactly as it would have. Only where SIGTERM would kill the process outright (the default
    action) and on the main thread (where Python runs signal handlers); elsewhere nothing
    changes. A save blocked inside a collective sees the signal when the call returns; the
    launcher's SIGKILL after its grace period can come first, and the next save then removes
    the staging directory left behind."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        raise  # not reached: the default action ends the process
    finally:
        if signal.getsignal(signal.SIGTERM) in (_raise, signal.SIG_IGN):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
