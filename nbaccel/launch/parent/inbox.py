"""A remote rank's messages as the supervisor reads them: a queue with a wake-up descriptor.

A host's agent sends every message of its ranks over one channel; the agent's reader thread
(``hostlinks.AgentLink``) hands each to its rank's :class:`Inbox`, and the supervisor reads
the inbox as it reads a local child's message pipe (``supervisor.WorkerLink.conn``): it waits
on :meth:`Inbox.fileno` with the other descriptors, then takes the messages with
:meth:`Inbox.recv_bytes`; once the rank has ended and its last message was taken,
``recv_bytes`` raises ``EOFError`` as a closed pipe does. The bytes stay in this process (no
copy through the kernel); the descriptor only says "something to read": it is readable while
the queue holds a message or the inbox has ended, and is read empty when the queue empties.
"""

from __future__ import annotations

import collections
import contextlib
import os
import select
import threading

__all__ = ["Inbox"]


class Inbox:
    """One rank's messages, put by one thread, taken by another (see the module docstring)."""

    def __init__(self) -> None:
        self._items: collections.deque[bytes] = collections.deque()
        self._ended = False
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._awake = False  # a byte waits in the wake-up pipe
        self._closed = False

    # -- the agent's reader thread ---------------------------------------------------------------
    def put(self, data: bytes) -> None:
        """One message of the rank's (dropped once the inbox has ended or was closed)."""
        with self._lock:
            if self._ended or self._closed:
                return
            self._items.append(data)
            self._wake()

    def end(self) -> None:
        """No message comes after this one: ``recv_bytes`` raises ``EOFError`` once empty."""
        with self._lock:
            if not self._closed:
                self._ended = True
                self._wake()

    def _wake(self) -> None:
        if not self._awake:
            os.write(self._wake_w, b"\0")
            self._awake = True

    # -- the supervisor ----------------------------------------------------------------------
    def fileno(self) -> int:
        return self._wake_r

    def poll(self, timeout: float | None = 0.0) -> bool:
        """True when ``recv_bytes`` would not wait (a message, or the end); waits up to
        ``timeout`` seconds (None: until then)."""
        with self._lock:
            if self._closed:
                raise OSError("the inbox is closed")
            if self._items or self._ended:
                return True
        select.select([self._wake_r], [], [], timeout)
        with self._lock:
            return bool(self._items) or self._ended

    def recv_bytes(self) -> bytes:
        """The next message; ``EOFError`` once the inbox has ended and is empty."""
        while not self.poll(None):
            pass
        with self._lock:
            if not self._items:
                raise EOFError("the rank has ended")
            data = self._items.popleft()
            if not self._items and not self._ended and self._awake:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_r, 1)
                self._awake = False
            return data

    def close(self) -> None:
        """Drop what is queued and release the descriptors (twice is harmless)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._items.clear()
            for fd in (self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    os.close(fd)
