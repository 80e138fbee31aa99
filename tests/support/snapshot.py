"""What one process holds that a launch or a pool must give back: a snapshot to compare."""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass

import psutil

__all__ = ["ProcessSnapshot"]


def _descriptor_kinds(pid: int) -> dict[str, int]:
    """How many open descriptors of each kind (pipe, socket, a file's path...) ``pid`` holds."""
    kinds: dict[str, int] = {}
    directory = f"/proc/{pid}/fd"
    for name in os.listdir(directory):
        try:
            target = os.readlink(os.path.join(directory, name))
        except FileNotFoundError:  # closed while listed
            continue
        kind = re.sub(r":\[\d+\]$", "", target)
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


@dataclass(frozen=True)
class ProcessSnapshot:
    """The resources of one process that a launch must give back."""

    children: frozenset[int]
    fds: dict[str, int]
    threads: int
    listening: frozenset[tuple[str, int]]
    temp_entries: frozenset[str]

    @classmethod
    def take(cls, pid: int, temp_dir: str | None = None) -> ProcessSnapshot:
        process = psutil.Process(pid)
        listening = frozenset(
            (c.laddr.ip, c.laddr.port)
            for c in process.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN
        )
        return cls(
            children=frozenset(p.pid for p in process.children(recursive=True)),
            fds=_descriptor_kinds(pid),
            threads=process.num_threads(),
            listening=listening,
            temp_entries=frozenset(os.listdir(temp_dir or tempfile.gettempdir())),
        )

    def assert_same(self, after: ProcessSnapshot) -> None:
        """Assert that ``after`` holds exactly what this snapshot held."""
        assert after.children == self.children, "child processes left behind"
        grown = {
            kind: (self.fds.get(kind, 0), count)
            for kind, count in after.fds.items()
            if count > self.fds.get(kind, 0)
        }
        # A descriptor the kernel closed on its own is no leak; one more of any kind is.
        assert not grown, f"file descriptors leaked (kind: before, after): {grown}"
        assert after.threads == self.threads, "threads left behind"
        assert after.listening == self.listening, "listening sockets left open"
        assert after.temp_entries == self.temp_entries, "temporary files left behind"
