"""Let a Jupyter kernel handle widget messages while a cell blocks (the dashboard's Stop button).

While a cell runs, an IPython kernel reads no message from the front end: a click on a widget
waits until the cell ends. ``notebook_launcher(..., dashboard=True)`` blocks its cell until the
workers end, so the dashboard opens a :class:`MessagePump` in :meth:`LaunchDashboard.begin` and
the launcher's supervising loop calls :meth:`MessagePump.poll` between its waits
(``on_wait``). Two ways, the first that fits the running kernel:

- ``jupyter-ui-poll`` (``pip install jupyter-ui-poll``; in the ``notebook`` extra), the library
  made for this, on the kernels it drives: those with ``Kernel.do_one_iteration`` (ipykernel 6,
  as on Colab and Kaggle, and the 7.x releases that still have it).
- ipykernels without ``do_one_iteration`` (7.4 here; ``jupyter-ui-poll`` then silently does
  nothing), where every shell message reaches the main thread through one in-process socket
  from the shell channel thread: read that socket, hand each ``comm_*`` message to the
  kernel's comm handlers at once (as the kernel itself does for an ``await``-ing cell), and
  keep every other message (a queued cell, say) as it came, to be given back to the kernel,
  in order, when the launch ends.

Elsewhere (a terminal, a launch on a background thread such as the panel's Launch, another
kernel) there is no pump, and nothing changes.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

__all__ = ["MessagePump", "open_message_pump"]

_LOG = logging.getLogger(__name__)
_COMM_MESSAGES = frozenset({"comm_open", "comm_msg", "comm_close"})


class MessagePump(Protocol):
    """Handles the front end's widget messages while the kernel's main thread is busy."""

    def poll(self) -> None:
        """Handle the widget messages that arrived since the last call (never blocks)."""

    def close(self) -> None:
        """Stop; give back to the kernel whatever it must still handle itself."""


def open_message_pump() -> MessagePump | None:
    """A pump for the running kernel, or None (not in a kernel's main thread, or no way)."""
    if threading.current_thread() is not threading.main_thread():
        return None  # the kernel's main thread is free: it handles the messages itself
    kernel = _running_kernel()
    if kernel is None:
        return None
    try:
        if hasattr(kernel, "do_one_iteration"):
            return _UiPollPump.open()
        return _ShellSocketPump.open(kernel)
    except Exception:  # an unknown kernel layout: no pump rather than a failed launch
        _LOG.debug("nbaccel: no widget message pump for this kernel", exc_info=True)
        return None


def _running_kernel() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return getattr(shell, "kernel", None) if shell is not None else None


class _UiPollPump:
    """``jupyter_ui_poll.ui_events()``: runs the kernel's ``do_one_iteration``."""

    def __init__(self, events: Any, poll: Any) -> None:
        self._events = events
        self._poll = poll

    @classmethod
    def open(cls) -> _UiPollPump | None:
        try:
            from jupyter_ui_poll import ui_events
        except ImportError:
            return None
        events = ui_events()
        return cls(events, events.__enter__())

    def poll(self) -> None:
        self._poll(10)

    def close(self) -> None:
        self._events.__exit__(None, None, None)


class _ShellSocketPump:
    """Reads the main shell's in-process socket of an ipykernel with a shell channel thread.

    Comm messages are handled at once by the kernel's own handlers; every other message is
    kept as it came (not deserialised: the session refuses a signature it has seen) and, on
    :meth:`close`, handed to ``Kernel.shell_main`` as the socket's stream would have, in order.
    """

    def __init__(self, kernel: Any, socket: Any, reply_stream: Any) -> None:
        self._kernel = kernel
        self._socket = socket
        self._reply_stream = reply_stream
        self._held: list[Any] = []

    @classmethod
    def open(cls, kernel: Any) -> _ShellSocketPump | None:
        channel = getattr(kernel, "shell_channel_thread", None)
        manager = getattr(channel, "manager", None)
        if manager is None or not callable(getattr(kernel, "shell_main", None)):
            return None
        pair = manager.get_shell_channel_to_subshell_pair(None)
        reply = manager.get_subshell_to_shell_channel_socket(None)
        return cls(kernel, pair.to_socket, reply)

    def poll(self) -> None:
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

    def close(self) -> None:
        held, self._held = self._held, []
        if not held:
            return
        for frames in held:  # started in order; execute requests then queue on their lock
            self._kernel.io_loop.add_callback(self._kernel.shell_main, None, frames)
