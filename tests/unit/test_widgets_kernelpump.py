"""The widget message pump without a kernel: which way is chosen, what it reads and gives back.

The real path (a kernel blocked in ``notebook_launcher(..., dashboard=True)`` and a Stop click
from the client) is tested in ``tests/notebook/test_dashboard_stop_kernel.py``.
"""

from __future__ import annotations

import threading
import types
from collections import deque
from typing import Any

import pytest
import zmq
from jupyter_client.session import Session

from nbaccel.widgets import kernelpump
from nbaccel.widgets.kernelpump import _ShellSocketPump, _ShellStreamPump, open_message_pump


class _Frame:
    """A received zmq frame (``copy=False``): the bytes under ``.bytes``."""

    def __init__(self, data: bytes) -> None:
        self.bytes = data
        self.buffer = memoryview(data)


class _Socket:
    """The main shell's in-process socket: a queue of multipart messages."""

    def __init__(self, messages: list[list[bytes]]) -> None:
        self.queue = deque(messages)

    def poll(self, timeout: int, flags: int) -> int:
        assert timeout == 0 and flags == zmq.POLLIN
        return zmq.POLLIN if self.queue else 0

    def recv_multipart(self, flags: int, copy: bool) -> list[_Frame]:
        assert flags == zmq.NOBLOCK and copy is False
        return [_Frame(part) for part in self.queue.popleft()]


class _Kernel:
    """What the pump uses of an ipykernel 7.4 kernel."""

    def __init__(self) -> None:
        self.session = Session(key=b"secret")
        self.handled: list[tuple[str, str]] = []
        self.given_back: list[Any] = []
        self.shell_handlers = {
            kind: (lambda stream, idents, msg, kind=kind: self._handle(kind, msg))
            for kind in ("comm_open", "comm_msg", "comm_close")
        }
        self.io_loop = types.SimpleNamespace(add_callback=self._add_callback)

    def _handle(self, kind: str, msg: dict[str, Any]) -> None:
        if msg["content"].get("comm_id") == "boom":
            raise RuntimeError("a failing widget handler")
        self.handled.append((kind, msg["content"]["comm_id"]))

    def _add_callback(self, function: Any, subshell: Any, frames: list[_Frame]) -> None:
        assert function == self.shell_main and subshell is None
        self.given_back.append(frames)

    async def shell_main(self, subshell_id: str | None, msg: Any) -> None:
        raise AssertionError("only scheduled through io_loop.add_callback")

    def wire(self, kind: str, content: dict[str, Any]) -> list[bytes]:
        return self.session.serialize(self.session.msg(kind, content), ident=[b"client"])


def test_outside_a_kernel_or_off_the_main_thread_there_is_no_pump() -> None:
    assert open_message_pump() is None  # pytest: no IPython kernel
    found: list[object] = []
    thread = threading.Thread(target=lambda: found.append(open_message_pump()))
    thread.start()
    thread.join()
    assert found == [None]


def test_comm_messages_are_handled_at_once_and_the_rest_given_back_in_order() -> None:
    kernel = _Kernel()
    execute = kernel.wire("execute_request", {"code": "1"})
    info = kernel.wire("kernel_info_request", {})
    socket = _Socket(
        [
            execute,
            kernel.wire("comm_msg", {"comm_id": "stop", "data": {"method": "custom"}}),
            [b"stop aborting"],  # the kernel's own one-frame marker
            kernel.wire("comm_msg", {"comm_id": "boom", "data": {}}),  # logged, not raised
            info,
            kernel.wire("comm_close", {"comm_id": "old"}),
        ]
    )
    pump = _ShellSocketPump(kernel, socket, reply_stream=None)
    pump.poll()
    assert kernel.handled == [("comm_msg", "stop"), ("comm_close", "old")]
    assert kernel.given_back == [] and not socket.queue
    pump.poll()  # nothing new: nothing happens
    pump.close()
    assert [[f.bytes for f in frames] for frames in kernel.given_back] == [
        execute,
        [b"stop aborting"],
        info,
    ]
    # the messages given back were not deserialised: the session would refuse a replay
    for frames in kernel.given_back[::2]:
        _idents, rest = kernel.session.feed_identities([f.bytes for f in frames])
        assert kernel.session.deserialize(rest)["header"]["msg_type"] != "comm_msg"


def test_an_interrupt_while_reading_keeps_the_message(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = _Kernel()
    execute = kernel.wire("execute_request", {"code": "1"})
    pump = _ShellSocketPump(kernel, _Socket([execute]), reply_stream=None)

    def interrupted(frames: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(pump, "_comm_message", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pump.poll()
    pump.close()
    assert [[f.bytes for f in frames] for frames in kernel.given_back] == [execute]


class _Kernel6:
    """What the pump uses of an ipykernel 6 kernel (Colab, Kaggle): a shell stream on the
    main thread's loop, whose receive callback queues each message for ``dispatch_shell``."""

    def __init__(self, messages: list[list[bytes]]) -> None:
        self.session = Session(key=b"secret")
        self.shell_stream = types.SimpleNamespace(socket=_Socket(messages))
        self.handled: list[str] = []
        self.queued: list[Any] = []
        self.shell_handlers = {"comm_msg": lambda stream, idents, msg: self._handle(stream, msg)}

    def _handle(self, stream: Any, msg: dict[str, Any]) -> None:
        assert stream is self.shell_stream
        self.handled.append(msg["content"]["comm_id"])

    def schedule_dispatch(self, dispatch: Any, frames: list[_Frame]) -> None:
        assert dispatch == self.dispatch_shell
        self.queued.append([f.bytes for f in frames])

    async def dispatch_shell(self, msg: Any) -> None:
        raise AssertionError("only queued through schedule_dispatch")


def test_ipykernel_6_comm_messages_at_once_the_rest_queued_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session = Session(key=b"secret")
    wire = [
        session.serialize(session.msg(kind, content), ident=[b"client"])
        for kind, content in (
            ("execute_request", {"code": "1"}),
            ("comm_msg", {"comm_id": "stop", "data": {}}),
            ("execute_request", {"code": "2"}),
        )
    ]
    kernel = _Kernel6(wire)
    monkeypatch.setattr(kernelpump, "_running_kernel", lambda: kernel)
    pump = open_message_pump()
    assert isinstance(pump, _ShellStreamPump)
    pump.poll()
    assert kernel.handled == ["stop"] and kernel.queued == []
    pump.close()
    assert kernel.queued == [wire[0], wire[2]]


def test_an_unknown_kernel_layout_gives_no_pump(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernelpump, "_running_kernel", lambda: types.SimpleNamespace())
    assert open_message_pump() is None

    class Broken:
        shell_channel_thread = types.SimpleNamespace(manager=object())

        async def shell_main(self, subshell_id: str | None, msg: Any) -> None:
            return None

    monkeypatch.setattr(kernelpump, "_running_kernel", Broken)
    assert open_message_pump() is None  # the manager lacks the socket pair: no pump, no error


def test_the_dashboard_says_when_stop_cannot_work_instead_of_a_dead_button(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("ipywidgets")
    from nbaccel.widgets import dashboard

    monkeypatch.setattr(kernelpump, "_running_kernel", lambda: types.SimpleNamespace())
    board = dashboard.LaunchDashboard(refresh_s=0.05)
    board.begin(2)  # in a kernel's main thread, with no way to read its messages
    try:
        assert board._stop.disabled
        assert "Interrupt the kernel instead" in board._stop_note.value
    finally:
        board.end(None)
    monkeypatch.setattr(kernelpump, "_running_kernel", lambda: None)  # a terminal: no note
    board.begin(2)
    try:
        assert not board._stop.disabled and board._stop_note.value == ""
    finally:
        board.end(None)


def test_the_dashboard_polls_its_pump_between_waits_and_closes_it_at_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("ipywidgets")
    from nbaccel.widgets import dashboard

    calls: list[str] = []
    fake = types.SimpleNamespace(
        poll=lambda: calls.append("poll"), close=lambda: calls.append("close")
    )
    monkeypatch.setattr(dashboard, "open_message_pump", lambda: fake)
    board = dashboard.LaunchDashboard(refresh_s=0.05)
    board.on_wait()  # before a launch: nothing to poll
    board.begin(2)
    board.on_wait()
    board.on_wait()
    board.end(None)
    board.on_wait()  # after the end: the pump is closed and gone
    assert calls == ["poll", "poll", "close"]
