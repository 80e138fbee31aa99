"""What the beds of network namespaces share (the hosts tier's sshd/SLURM bed, the Ray tier's
cluster): whether this machine can build one at all, and the process bookkeeping that lets a
bed prove it left nothing behind.

A process is known by ``(pid, start time)`` (:func:`identities`), so that a pid the system
reuses later is not taken for one the bed started.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["all_pids", "identities", "namespaces_refused", "ns_pids", "signal_group"]


def namespaces_refused(bed: str, rerun: str, probe: str) -> str | None:
    """Why this machine cannot make network namespaces (a skip's reason), or None. ``bed``
    names the bed in the reason, ``rerun`` is the command to run as root, ``probe`` the
    namespace made and removed to find out."""
    if os.geteuid() != 0:
        return f"{bed} needs root (network namespaces): run `sudo {rerun}`"
    if shutil.which("ip") is None:
        return f"{bed} needs iproute2's `ip` (apt-get install iproute2)"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` is refused here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def all_pids() -> list[int]:
    """Every process of this machine."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def ns_pids(ns: str) -> list[int]:
    """The processes of network namespace ``ns``."""
    done = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30)
    return [int(pid) for pid in done.stdout.split()]


def identities(pids: Sequence[int]) -> set[tuple[int, str]]:
    """``(pid, start time)`` of each live process among ``pids``: a pid reused later differs."""
    found = set()
    for pid in pids:
        with contextlib.suppress(OSError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            if fields[0] != "Z":  # a zombie is dead, waiting for its parent
                found.add((pid, fields[19]))
    return found


def signal_group(process: subprocess.Popen[Any], sig: signal.Signals) -> None:
    """Signal the process group of a process not yet reaped (each has one of its own)."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
