"""The byte stream between the notebook and one host's agent, however the agent was reached.

:class:`ProcessChannel`: an ``ssh`` (or ``srun``) process whose stdin and stdout carry the
frames and whose stderr says what went wrong. :class:`SocketChannel`: a TCP connection to the
agent a Ray actor runs on its node (``agent/rayhost.py``), authenticated both ways before any
frame; what the agent wrote to its stderr is asked of the actor. ``hostlinks.AgentLink`` reads
and writes frames through either alike.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import threading
from abc import ABC, abstractmethod
from typing import Any

__all__ = ["AgentChannel", "ProcessChannel", "SocketChannel"]

_STDERR_KEEP = 8192
_SRUN_TERM_WAIT_S = 3.0  # srun passes SIGTERM on to the step, which then ends its agent
_ACTOR_ANSWER_S = 5.0


class AgentChannel(ABC):
    """One agent's stream (see the module docstring). ``via`` names it in messages."""

    via: str

    @abstractmethod
    def write(self, data: bytes) -> None:
        """Send all of ``data``; ``OSError`` (or ``ValueError``) once the stream is closed."""

    @abstractmethod
    def read(self) -> bytes:
        """The next bytes from the agent (blocking); ``b""`` at the end."""

    @abstractmethod
    def said(self) -> str:
        """What the transport or the agent wrote to its stderr, last lines."""

    @abstractmethod
    def poll(self) -> int | None:
        """The transport's exit code once it ended, else None (never blocks)."""

    @abstractmethod
    def wait(self, timeout: float) -> int | None:
        """:meth:`poll`, waiting up to ``timeout`` seconds."""

    @abstractmethod
    def close_input(self) -> None:
        """End the stream towards the agent (which then stops its ranks and ends)."""

    @abstractmethod
    def end(self) -> None:
        """End the agent now, whatever it is doing."""

    @abstractmethod
    def release(self) -> None:
        """Close what this side holds; the channel is not used after."""

    @abstractmethod
    def command(self) -> str:
        """What started the agent, for messages."""


class ProcessChannel(AgentChannel):
    """``argv`` (ssh or srun, ``via``) as a child in its own session."""

    def __init__(self, argv: list[str], via: str) -> None:
        self.argv, self.via = argv, via
        self._stderr = bytearray()
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # an interrupt of the kernel reaches the launcher only
        )
        self._errors = threading.Thread(target=self._read_stderr, daemon=True)
        self._errors.start()

    def write(self, data: bytes) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(data)
        stdin.flush()

    def read(self) -> bytes:
        stdout = self.process.stdout
        assert stdout is not None
        return os.read(stdout.fileno(), 1 << 16)

    def _read_stderr(self) -> None:
        stderr = self.process.stderr
        assert stderr is not None
        with contextlib.suppress(OSError, ValueError):
            for chunk in iter(lambda: os.read(stderr.fileno(), 4096), b""):
                self._stderr.extend(chunk)
                del self._stderr[:-_STDERR_KEEP]

    def said(self) -> str:
        return bytes(self._stderr).decode("utf-8", "replace")

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self, timeout: float) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.process.wait(timeout=timeout)
        return None

    def close_input(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if self.process.stdin is not None:
                self.process.stdin.close()

    def end(self) -> None:
        """Kill the process group; srun gets SIGTERM first, which it passes on to the step
        (a killed srun would leave the step to notice on its own)."""
        if self.process.poll() is not None:
            return
        if self.via == "srun":
            with contextlib.suppress(OSError):
                os.killpg(self.process.pid, signal.SIGTERM)
            self.wait(_SRUN_TERM_WAIT_S)
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.process.pid, signal.SIGKILL)

    def release(self) -> None:
        self._errors.join(_ACTOR_ANSWER_S)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()

    def command(self) -> str:
        return shlex.join(self.argv)


class SocketChannel(AgentChannel):
    """The authenticated connection ``sock`` to the agent that ``actor`` (an
    ``agent.rayhost.AgentHost``) runs with ``python`` on its node."""

    via = "ray"

    def __init__(self, sock: socket.socket, actor: Any, python: str) -> None:
        self.sock, self.actor, self.python = sock, actor, python
        self._ended = threading.Event()
        self._code: int | None = None

    def write(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self) -> bytes:
        data = self.sock.recv(1 << 16)
        if not data:
            self._ended.set()
        return data

    def _ask(self, method: str, *args: Any) -> Any:
        """The actor's answer, or None where it is gone or silent."""
        import ray  # this channel exists only where Ray was imported

        with contextlib.suppress(Exception):
            return ray.get(getattr(self.actor, method).remote(*args), timeout=_ACTOR_ANSWER_S)
        return None

    def said(self) -> str:
        return str(self._ask("said") or "")

    def poll(self) -> int | None:
        return self._code

    def wait(self, timeout: float) -> int | None:
        if self._code is None and self._ended.wait(timeout):
            code = self._ask("exit_code", min(timeout, _ACTOR_ANSWER_S - 1))
            self._code = code if isinstance(code, int) else None
        return self._code

    def close_input(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)

    def end(self) -> None:
        """Kill the actor (its agent dies with it, and the ranks with the agent)."""
        import ray  # Ray is optional (the ray extra)

        with contextlib.suppress(Exception):
            ray.kill(self.actor, no_restart=True)
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self._ended.set()

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def command(self) -> str:
        return f"{shlex.join([self.python, '-m', 'nbaccel.launch.agent'])} (a Ray actor there)"
