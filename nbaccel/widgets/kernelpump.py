"""Let a Jupyter kernel handle widget messages while a cell blocks (the dashboard's Stop button).

While a cell runs, an IPython kernel reads no message from the front end: a click on a widget
waits until the cell ends. ``notebook_launcher(..., dashboard=True)`` blocks its cell until the
workers end, so the dashboard opens a :class:`MessagePump` in :meth:`LaunchDashboard.begin` and
the launcher's supervising loop calls :meth:`MessagePump.poll` between its waits
(``on_wait``). The pump reads the kernel's shell messages itself, with nothing but the kernel
(no extra package), in the two layouts ipykernel has had:

- ipykernel 7 (a shell channel thread; subshells): every shell message reaches the main thread
  through one in-process socket, which the pump reads (:class:`_ShellSocketPump`);
- ipykernel 6 (Colab, Kaggle): the main thread reads the shell socket itself, through a
  ``ZMQStream`` on its event loop, which the pump reads while the loop is blocked
  (:class:`_ShellStreamPump`).

Either way each ``comm_*`` message is handed to the kernel's comm handlers at once (as the
kernel itself does for an ``await``-ing cell), and every other message (a queued cell, say) is
kept as it came, to be given back to the kernel, in order and ahead of anything that arrives
later, when the launch ends: the kernel then runs it, or aborts it after an error, exactly as
it would have without the pump, with its own busy and idle status messages.

Elsewhere (a terminal, or a launch on a background thread such as the panel's Launch) there is
no pump and none is needed; :func:`blocks_a_kernel` tells the dashboard when one was needed but
none fits the running kernel, so that it can say that Stop cannot work there.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

__all__ = ["MessagePump", "blocks_a_kernel", "open_message_pump"]

_LOG = logging.getLogger(__name__)
_COMM_MESSAGES = frozenset({"comm_open", "comm_msg", "comm_close"})


class MessagePump(Protocol):
    """Handles the front end's widget messages while the kernel's main thread is busy."""

    def poll(self) -> None:
        """Handle the widget messages that arrived since the last call (never blocks)."""

    def close(self) -> None:
        """Give back to the kernel whatever it must still handle itself. The pump may be
        polled again afterwards (a worker pool reuses one pump for each of its calls)."""


def blocks_a_kernel() -> bool:
    """True when called on the main thread of a running kernel: a launch here blocks its cell."""
    return threading.current_thread() is threading.main_thread() and _running_kernel() is not None


def open_message_pump() -> MessagePump | None:
    """A pump for the running kernel, or None (not in a kernel's main thread, or no way)."""
    if not blocks_a_kernel():
        return None  # no kernel, or its main thread is free: it handles the messages itself
    kernel = _running_kernel()
    for layout in (_ShellSocketPump, _ShellStreamPump):
        try:
            pump = layout.open(kernel)
        except Exception:  # an unknown kernel layout: no pump rather than a failed launch
            _LOG.debug("nbaccel: no widget message pump for this kernel", exc_info=True)
            pump = None
        if pump is not None:
            return pump
    return None


def _running_kernel() -> Any:
    try:
        # IPython is there only in a notebook (the notebook extra)
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return getattr(shell, "kernel", None) if shell is not None else None


class _Reader:
    """Reads one shell socket: comm messages to the kernel's handlers, the rest kept in order."""

    def __init__(self, kernel: Any, socket: Any, reply_stream: Any) -> None:
        self._kernel = kernel
        self._socket = socket
        self._reply_stream = reply_stream
        self._held: list[Any] = []

    def poll(self) -> None:
        # zmq comes with ipykernel, there only in a notebook (the notebook extra)
        import zmq

        while self._socket.poll(0, zmq.POLLIN):
            frames = self._socket.recv_multipart(zmq.NOBLOCK, copy=False)
            try:
                comm = self._comm_message(frames)
            except BaseException:  # an interrupt here must not lose the message
                self._held.append(frames)
                raise
            if comm is None:
                self._held.append(frames)
                continue
            idents, message = comm
            try:
                kind = message["header"]["msg_type"]
                self._kernel.shell_handlers[kind](self._reply_stream, idents, message)
            except Exception:  # as the kernel does: a failing comm handler is logged
                _LOG.exception("nbaccel: a widget message failed while the launch ran")

    def _comm_message(self, frames: list[Any]) -> tuple[Any, dict[str, Any]] | None:
        """``(idents, message)`` for a comm message, else None (the message stays unread)."""
        if len(frames) < 2:  # e.g. the kernel's own one-frame "stop aborting" marker
            return None
        session = self._kernel.session
        try:
            idents, rest = session.feed_identities(frames, copy=False)
            kind = session.unpack(rest[1].bytes).get("msg_type")
        except Exception:
            return None
        if kind not in _COMM_MESSAGES:
            return None
        try:
            return idents, session.deserialize(rest, content=True, copy=False)
        except Exception:
            _LOG.exception("nbaccel: an invalid widget message was dropped")
            return None

    def take_held(self) -> list[Any]:
        """The messages kept for the kernel, oldest first (the reader holds none afterwards)."""
        held, self._held = self._held, []
        return held


class _ShellSocketPump(_Reader):
    """ipykernel 7: reads the main shell's in-process socket from the shell channel thread.

    Messages are kept as they came (not deserialised: the session refuses a signature it has
    seen) and, on :meth:`close`, handed to ``Kernel.shell_main`` as the socket's stream would
    have, in order.
    """

    @classmethod
    def open(cls, kernel: Any) -> _ShellSocketPump | None:
        channel = getattr(kernel, "shell_channel_thread", None)
        manager = getattr(channel, "manager", None)
        if manager is None or not callable(getattr(kernel, "shell_main", None)):
            return None
        pair = manager.get_shell_channel_to_subshell_pair(None)
        reply = manager.get_subshell_to_shell_channel_socket(None)
        return cls(kernel, pair.to_socket, reply)

    def close(self) -> None:
        for frames in self.take_held():  # started in order; execute requests queue on a lock
            self._kernel.io_loop.add_callback(self._kernel.shell_main, None, frames)


class _ShellStreamPump(_Reader):
    """ipykernel 6: reads the shell ``ZMQStream``'s socket while the main event loop is blocked.

    On :meth:`close` the kept messages go to the kernel's message queue, as the stream's own
    receive callback puts them there (``schedule_dispatch(dispatch_shell, frames)``): ahead of
    every message the stream reads later, so the kernel handles them in the order they came.
    """

    @classmethod
    def open(cls, kernel: Any) -> _ShellStreamPump | None:
        if getattr(kernel, "shell_channel_thread", None) is not None:
            return None  # ipykernel 7: the main thread must not read the shell socket
        stream = getattr(kernel, "shell_stream", None)
        socket = getattr(stream, "socket", None)
        needed = ("schedule_dispatch", "dispatch_shell")
        if socket is None or not all(callable(getattr(kernel, n, None)) for n in needed):
            return None
        return cls(kernel, socket, stream)

    def close(self) -> None:
        for frames in self.take_held():
            self._kernel.schedule_dispatch(self._kernel.dispatch_shell, frames)
