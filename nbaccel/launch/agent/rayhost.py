"""The Ray actor that runs a host's agent on one node of a Ray cluster (``hosts="ray"``).

The notebook places one :class:`AgentHost` on each node it takes, in that node's bundle of the
placement group it reserved. :meth:`AgentHost.listen` binds a socket to the node's address (a
port of the system's choice) and accepts, within ``accept_timeout``, one connection that proves
it holds this attempt's key: ``multiprocessing.connection``'s challenge in both directions
(HMAC; the key itself never crosses the network). Any other connection is closed unanswered,
and the socket stops listening once the notebook is in. The actor then runs
``python -m nbaccel.launch.agent --die-with-parent`` with that connection as its stdin and
stdout: the same agent and frames as over ssh. The agent dies with the actor (the actor is
killed when the notebook's driver goes away), its ranks with the agent.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

from ..slurmhosts import AGENT_MODULE

__all__ = ["AgentHost", "handshake"]

_HANDSHAKE_S = 10
_ERRORS_KEEP = 8192


def _receive_timeout(sock: socket.socket, seconds: int) -> None:
    """Bound each blocking read of ``sock`` (0: unbounded again); the descriptor stays
    blocking, as ``Connection`` and the agent read it."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", seconds, 0))


def handshake(sock: socket.socket, key: bytes, server: bool) -> bool:
    """Both ends prove they hold ``key`` (the server asks first); False where the other end
    does not, or does not answer within a few seconds."""
    _receive_timeout(sock, _HANDSHAKE_S)
    conn = Connection(os.dup(sock.fileno()))
    try:
        if server:
            deliver_challenge(conn, key)
            answer_challenge(conn, key)
        else:
            answer_challenge(conn, key)
            deliver_challenge(conn, key)
    except (AuthenticationError, OSError, EOFError):
        return False
    finally:
        conn.close()
        with contextlib.suppress(OSError):
            _receive_timeout(sock, 0)
    return True


class AgentHost:
    """One node's agent, run for the notebook (see the module docstring).

    Args:
        key: the attempt's key, which the notebook's connection must prove it holds.
        python: the interpreter that runs the agent (None: this actor's own).
        accept_timeout: seconds to wait for the notebook's connection.
    """

    def __init__(self, key: bytes, python: str | None, accept_timeout: float) -> None:
        self._key = key
        self._python = python or sys.executable
        self._accept_timeout = accept_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._errors = bytearray()
        self._failure: str | None = None

    def listen(self) -> tuple[str, int, str]:
        """Bind and start accepting; ``(address, port, host name)`` of the socket."""
        import ray  # only a Ray worker process runs this class

        address = ray.util.get_node_ip_address()
        listener = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
        listener.bind((address, 0))
        listener.listen(4)
        port = int(listener.getsockname()[1])
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return address, port, socket.gethostname()

    def _accept(self, listener: socket.socket) -> None:
        deadline = time.monotonic() + self._accept_timeout
        try:
            while (left := deadline - time.monotonic()) > 0:
                listener.settimeout(left)
                try:
                    sock, _ = listener.accept()
                except TimeoutError:
                    break
                sock.settimeout(None)
                if handshake(sock, self._key, server=True):
                    self._run(sock)
                    return
                sock.close()
            self._failure = f"the notebook did not connect within {self._accept_timeout:g}s"
        finally:
            listener.close()

    def _run(self, sock: socket.socket) -> None:
        with sock:
            self._process = subprocess.Popen(
                [self._python, "-m", AGENT_MODULE, "--die-with-parent"],
                stdin=sock.fileno(),
                stdout=sock.fileno(),
                stderr=subprocess.PIPE,
            )
        threading.Thread(target=self._read_errors, daemon=True).start()

    def _read_errors(self) -> None:
        process = self._process
        assert process is not None and process.stderr is not None
        fd = process.stderr.fileno()
        with contextlib.suppress(OSError, ValueError):
            for chunk in iter(lambda: os.read(fd, 4096), b""):
                self._errors.extend(chunk)
                del self._errors[:-_ERRORS_KEEP]

    def said(self) -> str:
        """What the agent wrote to its stderr (its last lines), or why it never started."""
        text = bytes(self._errors).decode("utf-8", "replace")
        return text or self._failure or ""

    def exit_code(self, timeout: float) -> int | None:
        """The agent's exit code, waiting up to ``timeout`` seconds; None while it runs."""
        if self._process is None:
            return None
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self._process.wait(timeout)
        return None
