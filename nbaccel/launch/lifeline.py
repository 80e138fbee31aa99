"""A process that must not outlive the one that started it: a worker (its launcher or host
agent) and a host's agent on a Ray node (its actor)."""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time

__all__ = ["die_with_parent"]

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to kill this process when ``parent_pid`` dies (Linux), else poll for it;
    end now where the parent already died before the request took effect."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux

        def watch() -> None:
            while os.getppid() == parent_pid:
                time.sleep(0.5)
            os._exit(1)

        threading.Thread(target=watch, name="nbaccel-parent-watch", daemon=True).start()
    if os.getppid() != parent_pid:
        os._exit(1)
