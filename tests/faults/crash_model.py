"""What a power cut leaves on the disk, replayed from the system calls a process made.

A process runs under ``strace -f -y`` (:data:`STRACE_ARGS`); :class:`Disk` replays the trace
with the rules of a POSIX file system after a crash: a file's data survives only once it was
``fsync``ed (or ``fdatasync``ed) after its last write, and a name (a new file, a new
directory, a rename) only once its directory was ``fsync``ed. :meth:`Disk.lost` names the
files below a directory that a crash at that point of the trace would leave empty, partial
or without their name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["STRACE_ARGS", "Call", "Disk", "calls"]

SYSCALLS = (
    "openat,open,creat,write,pwrite64,pwritev,pwritev2,writev,fsync,fdatasync,"
    "rename,renameat,renameat2,mkdir,mkdirat"
)
STRACE_ARGS = ["strace", "-f", "-y", "-qq", "-s", "0", "-e", f"trace={SYSCALLS}"]

_LINE = re.compile(r"^(\d+)\s+(.*)$")
_START = re.compile(r"^(\w+)\((.*?)(?: <unfinished \.\.\.>)?$")
_RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>(.*)$")
_RESULT = re.compile(r"\)\s+=\s+(-?\d+)")
_FD_PATH = re.compile(r"^-?\d+<(/[^>]*)>")
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Call:
    """One finished system call: its name, its arguments as text and its result."""

    name: str
    args: str
    result: int

    def fd_path(self) -> str | None:
        """The path of the descriptor in the first argument (strace ``-y``), if a file's."""
        match = _FD_PATH.match(self.args)
        return match.group(1) if match else None

    def strings(self) -> list[str]:
        """The quoted path arguments, in order."""
        return [s.encode().decode("unicode_escape") for s in _STRING.findall(self.args)]


def calls(trace: str) -> Iterator[Call]:
    """The calls of a trace in the order they finished (threads' calls interleave)."""
    pending: dict[str, tuple[str, str]] = {}
    for line in trace.splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        pid, text = match.groups()
        resumed = _RESUMED.match(text)
        if resumed:
            name, rest = resumed.groups()
            started = pending.pop(pid, (name, ""))
            text = f"{name}({started[1]}{rest}"
        elif text.endswith("<unfinished ...>"):
            start = _START.match(text)
            if start:
                pending[pid] = (start.group(1), start.group(2))
            continue
        start, result = _START.match(text), _RESULT.search(text)
        if start and result:
            yield Call(start.group(1), start.group(2), int(result.group(1)))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _moved(path: str, old: str, new: str) -> str:
    return new + path[len(old) :] if _under(path, old) else path


@dataclass
class Disk:
    """The replayed state: data not yet flushed, names not yet flushed."""

    dirty: set[str] = field(default_factory=set)  # files whose last writes are not flushed
    unflushed: set[str] = field(default_factory=set)  # names whose directory is not flushed
    renames: list[tuple[str, str]] = field(default_factory=list)  # (old, new), in order

    def apply(self, call: Call) -> None:
        """Replay one successful call."""
        if call.result < 0:
            return
        if call.name in ("write", "pwrite64", "pwritev", "pwritev2", "writev"):
            path = call.fd_path()
            if path is not None:
                self.dirty.add(path)
        elif call.name in ("fsync", "fdatasync"):
            path = call.fd_path()
            if path is not None:
                self.dirty.discard(path)  # the file's data
                self.unflushed -= {n for n in self.unflushed if str(Path(n).parent) == path}
        elif call.name in ("openat", "open", "creat", "mkdir", "mkdirat"):
            creates = call.name.startswith(("creat", "mkdir")) or "O_CREAT" in call.args
            names = call.strings()
            if creates and names:  # a new name (or an existing one: counted as new)
                self.unflushed.add(self._absolute(call, names[0]))
        elif call.name.startswith("rename"):
            self._rename(call)

    @staticmethod
    def _absolute(call: Call, path: str) -> str:
        """``path`` resolved against the directory descriptor of an ``*at`` call."""
        if path.startswith("/"):
            return path
        directory = _FD_PATH.match(call.args.replace("AT_FDCWD", "-100", 1))
        return str(Path(directory.group(1), path)) if directory else path

    def _rename(self, call: Call) -> None:
        old, new = call.strings()[:2]
        exchange = "RENAME_EXCHANGE" in call.args
        self.renames.append((old, new))
        if exchange:  # both names now point elsewhere: swap what is known under each
            swap = "\0swap"
            self._move(old, swap)
            self._move(new, old)
            self._move(swap, new)
            self.unflushed |= {old, new}
            return
        self._move(old, new)
        self.unflushed.discard(old)
        self.unflushed.add(new)

    def _move(self, old: str, new: str) -> None:
        self.dirty = {_moved(p, old, new) for p in self.dirty}
        self.unflushed = {_moved(p, old, new) for p in self.unflushed}

    def lost(self, root: str, files: list[str]) -> list[str]:
        """Which of ``files`` (paths below ``root``) a crash now would leave without their
        data or their name: the file's data is not flushed, or a name on its path below
        ``root`` (``root`` itself excluded) is not."""
        missing = []
        for path in files:
            parts = [path]
            while parts[-1] != root and _under(parts[-1], root):
                parts.append(str(Path(parts[-1]).parent))
            if path in self.dirty or any(p in self.unflushed for p in parts[:-1]):
                missing.append(path)
        return missing
