"""The output relay: every rank's output, rank-prefixed and line-whole, to the parent's streams.

The worker's side (its fds 1 and 2 into the relay's pipes) is ``worker/redirect.py``. Ranks on
other hosts have no pipes here: their agent's reader hands their output to :meth:`OutputRelay.feed`
(``fed=True``), and it is cut into lines and prefixed the same way.
"""

from __future__ import annotations

import os
import re
import selectors
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TextIO

from ..worker.redirect import redirect_child_output

__all__ = ["OutputRelay"]


_CHUNK = 64 * 1024
_POLL_S = 0.05
_MAX_DRAIN_READS = 64
# A line ends at "\n", at "\r\n", or at a lone "\r" (progress bars redraw with "\r").
_LINE_END = re.compile(rb"\r\n|\n|\r")


class _Pipe:
    """One captured stream of one rank: its pipe ends and its unfinished line."""

    def __init__(
        self, prefix: str, stream: TextIO, local_rank: int = 0, name: str = "", fed: bool = False
    ) -> None:
        self.local_rank = local_rank
        self.name = name
        # a fed stream (a rank on another host) has no pipe: its bytes come through feed()
        self.read_fd, write_fd = (-1, -1) if fed else os.pipe()
        self.write_fd: int | None = None if fed else write_fd
        self.prefix = prefix
        self.stream = stream
        self.pending = bytearray()
        self.eof = False

    def take_lines(self, data: bytes, final: bool) -> str:
        """Append ``data``; return every finished segment, prefixed and newline-terminated."""
        return "".join(self.prefix + line + "\n" for line in self.take_segments(data, final))

    def take_segments(self, data: bytes, final: bool) -> list[str]:
        """Append ``data``; return every finished segment, without prefix or line end."""
        buf = self.pending
        scan_from = max(len(buf) - 1, 0)  # the old tail holds no line end, bar a final "\r"
        buf.extend(data)
        out: list[str] = []
        start = 0
        for match in _LINE_END.finditer(buf, scan_from):
            end = match.end()
            if not final and end == len(buf) and match.group() == b"\r":
                break  # might be the first half of "\r\n": wait for more
            segment = buf[start : match.start()]
            start = end
            if segment or match.group() != b"\r":
                out.append(segment.decode("utf-8", "replace"))
        del buf[:start]
        if final and buf:
            out.append(buf.decode("utf-8", "replace"))
            buf.clear()
        return out


class OutputRelay:
    """Capture every local rank's stdout and stderr and stream them, prefixed, to the parent.

    Each rank gets two pipes. One daemon thread reads all of them and writes only complete
    lines (a lone ``"\\r"`` also ends a line, so progress bars show), each prefixed, to the
    parent's streams, so lines of different ranks never interleave.

    Args:
        prefixes: Local rank -> prefix string (see :func:`format_prefix`).
        stdout: Where the ranks' stdout goes; default ``sys.stdout`` as it is now (in a
            Jupyter kernel, the running cell's stream).
        stderr: Where the ranks' stderr goes; default ``sys.stderr`` as it is now.
        line_sink: Also called, from the reader thread, with ``(local_rank, "stdout" or
            "stderr", line)`` for every whole line (no prefix, no line end), after the line was
            written to the parent's stream; the launch dashboard shows per-rank output this way.
            Exceptions it raises are ignored.
        fed: the ranks run on other hosts: no pipes, their output comes through :meth:`feed`.
    """

    def __init__(
        self,
        prefixes: Mapping[int, str],
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        line_sink: Callable[[int, str, str], None] | None = None,
        fed: bool = False,
    ) -> None:
        self._line_sink = line_sink
        self._stdout: TextIO = sys.stdout if stdout is None else stdout
        self._stderr: TextIO = sys.stderr if stderr is None else stderr
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()  # one reader of a pipe at a time (see drain)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._selector: selectors.BaseSelector | None = None
        self._closed = False
        self._pipes: dict[int, tuple[_Pipe, _Pipe]] = {}
        try:
            for local_rank, prefix in prefixes.items():
                self._pipes[local_rank] = (
                    _Pipe(prefix, self._stdout, local_rank, "stdout", fed),
                    _Pipe(prefix, self._stderr, local_rank, "stderr", fed),
                )
        except BaseException:
            self._close_fds()
            raise

    def ranks(self) -> list[int]:
        """The ranks this relay has pipes for (the keys of ``prefixes``)."""
        return list(self._pipes)

    def _all_pipes(self) -> list[_Pipe]:
        return [pipe for pair in self._pipes.values() for pipe in pair]

    def child_fds(self, local_rank: int) -> tuple[int, int]:
        """Return the write ends ``(stdout_fd, stderr_fd)`` that rank ``local_rank`` writes to.

        Raises:
            KeyError: If the rank has no pipes.
            RuntimeError: If the write ends were already closed in this process.
        """
        out, err = self._pipes[local_rank]
        if out.write_fd is None or err.write_fd is None:
            raise RuntimeError(
                f"the output pipes of local rank {local_rank} were already closed in this "
                "process; start the children before close_child_ends()"
            )
        return out.write_fd, err.write_fd

    def redirect_forked_child(self, local_rank: int) -> None:
        """In a forked child: close every relay fd but this rank's, then redirect 1 and 2.

        Without this, a forked rank keeps copies of the other ranks' write ends and of every
        read end (so their EOF waits for this rank too). The relay object is inert afterwards.
        """
        keep = self.child_fds(local_rank)
        self._closed = True  # the child must never close or join anything of the parent's
        for pipe in self._all_pipes():
            for fd in (pipe.read_fd, pipe.write_fd):
                if fd is not None and fd not in keep:
                    os.close(fd)
        redirect_child_output(*keep)

    def start(self) -> None:
        """Start the reader thread (once); lines are streamed from now on."""
        if self._thread is not None or self._closed:
            return
        if all(pipe.read_fd < 0 for pipe in self._all_pipes()):
            return  # fed streams only: feed() streams them, nothing to read
        self._selector = selectors.DefaultSelector()
        for pipe in self._all_pipes():
            if pipe.read_fd >= 0:  # a fed stream has nothing to read
                os.set_blocking(pipe.read_fd, False)
                self._selector.register(pipe.read_fd, selectors.EVENT_READ, pipe)
        self._thread = threading.Thread(target=self._run, name="nbaccel-output-relay", daemon=True)
        self._thread.start()

    def close_child_ends(self) -> None:
        """Close the parent's copies of the write ends (after the children started)."""
        for pipe in self._all_pipes():
            if pipe.write_fd is not None:
                os.close(pipe.write_fd)
                pipe.write_fd = None

    def close(self, timeout: float = 5.0) -> None:
        """Finish streaming and release every fd; call after all children exited.

        Waits up to ``timeout`` seconds for EOF on every pipe (a grandchild may still hold
        one), emits what is left (a trailing partial line gets a newline) and closes all fds.
        Idempotent.
        """
        if self._closed:
            return
        self.close_child_ends()
        self.start()
        with self._read_lock:  # a fed stream's unfinished line goes out now
            for pipe in self._all_pipes():
                if pipe.read_fd < 0 and not pipe.eof:
                    pipe.eof = True
                    self._emit(pipe, pipe.take_segments(b"", final=True))
        self._closed = True
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            self._stop.set()
            thread.join(max(1.0, 20 * _POLL_S))
            if thread.is_alive():
                # Stuck writing to the parent stream: closing fds under it could make it read
                # from an unrelated file that reuses the number, so leave them to the process.
                return
        self._close_fds()

    def _close_fds(self) -> None:
        self.close_child_ends()
        if self._selector is not None:
            self._selector.close()
            self._selector = None
        for pipe in self._all_pipes():
            if pipe.read_fd >= 0:
                os.close(pipe.read_fd)
                pipe.read_fd = -1

    def __enter__(self) -> OutputRelay:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _run(self) -> None:
        selector = self._selector
        assert selector is not None
        open_pipes = len(selector.get_map())
        try:
            while open_pipes and not self._stop.is_set():
                for key, _ in selector.select(_POLL_S):
                    pipe: _Pipe = key.data
                    self._read(pipe, max_reads=1)
                    if pipe.eof:
                        selector.unregister(pipe.read_fd)
                        open_pipes -= 1
        finally:
            for pipe in self._all_pipes():
                if not pipe.eof and pipe.read_fd >= 0:
                    self._read(pipe, max_reads=_MAX_DRAIN_READS)
                    self._emit(pipe, pipe.take_segments(b"", final=True))

    def feed(self, local_rank: int, stream: int, data: bytes) -> None:
        """Stream what rank ``local_rank`` wrote to ``stream`` (1 or 2) on another host; ``b""``:
        that stream ended (its unfinished line goes out). From the agent's reader thread."""
        pipes = self._pipes.get(local_rank)
        if pipes is None or stream not in (1, 2) or self._closed:
            return
        pipe = pipes[stream - 1]
        with self._read_lock:
            if pipe.eof:
                return
            pipe.eof = not data
            self._emit(pipe, pipe.take_segments(data, final=pipe.eof))

    def drain(self, local_rank: int) -> None:
        """Stream now every whole line rank ``local_rank`` has written so far (from any thread).

        The display channel calls it before drawing a rank's rich output, so that the text the
        rank wrote before it comes first in the cell.
        """
        if self._thread is None or self._closed or local_rank not in self._pipes:
            return
        for pipe in self._pipes[local_rank]:
            if not pipe.eof and pipe.read_fd >= 0:
                self._read(pipe, max_reads=_MAX_DRAIN_READS)

    def _read(self, pipe: _Pipe, max_reads: int) -> None:
        with self._read_lock:
            self._read_locked(pipe, max_reads)

    def _read_locked(self, pipe: _Pipe, max_reads: int) -> None:
        for _ in range(max_reads):
            try:
                data = os.read(pipe.read_fd, _CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                pipe.eof = True
            self._emit(pipe, pipe.take_segments(data, final=pipe.eof))
            if pipe.eof:
                return

    def _emit(self, pipe: _Pipe, lines: list[str]) -> None:
        if not lines:
            return
        # torch prefixes its own C++ log lines with the rank ("[rank1]:[W ...]"): not twice
        stem = pipe.prefix.rstrip()
        text = "".join(
            (line if stem and line.startswith(stem) else pipe.prefix + line) + "\n"
            for line in lines
        )
        with self._lock:
            try:
                pipe.stream.write(text)
                pipe.stream.flush()
            except Exception:  # a broken parent stream must not stop the draining
                pass
            if self._line_sink is not None:
                for line in lines:
                    try:
                        self._line_sink(pipe.local_rank, pipe.name, line)
                    except Exception:  # a failing sink must not stop the draining either
                        pass
