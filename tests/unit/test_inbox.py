"""The inbox a remote rank's messages wait in for the supervisor: read as a local child's
message pipe is read (waited on with the other descriptors, ``EOFError`` at the end)."""

from __future__ import annotations

import select
import threading
from multiprocessing.connection import wait

import pytest

from nbaccel.launch.parent.inbox import Inbox


def _readable(inbox: Inbox) -> bool:
    return bool(select.select([inbox.fileno()], [], [], 0)[0])


def test_messages_come_out_in_order_and_the_descriptor_says_when() -> None:
    inbox = Inbox()
    try:
        assert not _readable(inbox) and not inbox.poll(0.01)
        inbox.put(b"one")
        inbox.put(b"two")
        assert _readable(inbox) and inbox.poll()
        assert inbox.recv_bytes() == b"one"
        assert _readable(inbox)  # one still waits
        assert inbox.recv_bytes() == b"two"
        assert not _readable(inbox) and not inbox.poll()
    finally:
        inbox.close()


def test_the_end_reads_as_a_closed_pipe_after_the_last_message() -> None:
    inbox = Inbox()
    try:
        inbox.put(b"last words")
        inbox.end()
        inbox.put(b"after the end")  # dropped, as a message after a rank's exit
        assert inbox.recv_bytes() == b"last words"
        assert _readable(inbox) and inbox.poll()  # the end stays readable
        with pytest.raises(EOFError):
            inbox.recv_bytes()
    finally:
        inbox.close()
    inbox.close()  # twice is harmless
    with pytest.raises(OSError):
        inbox.poll()


def test_a_writer_thread_and_the_supervisors_wait_lose_nothing() -> None:
    inbox = Inbox()
    sent = [str(i).encode() for i in range(2000)]

    def write() -> None:
        for data in sent:
            inbox.put(data)
        inbox.end()

    writer = threading.Thread(target=write)
    writer.start()
    got: list[bytes] = []
    try:
        while True:
            assert wait([inbox], timeout=10) == [inbox]  # as Supervisor.pump waits
            try:
                got.append(inbox.recv_bytes())
            except EOFError:
                break
    finally:
        writer.join(10)
        inbox.close()
    assert got == sent
