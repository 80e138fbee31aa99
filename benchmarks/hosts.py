"""Where a benchmark's subject runs its cells: a long-lived plain Python process (a script) or
a real Jupyter kernel. Both take the same cells and give back the same :class:`CellResult`.

Each subject gets its own host for the whole benchmark, as a user keeps one kernel: a launcher
that leaves signal handlers, environment variables or threads behind cannot disturb the other
subjects. A cell that fails, a host that dies and a cell that runs past its time limit all raise
:class:`HostError` naming the subject, with the end of what the host printed.
"""

from __future__ import annotations

import ast
import contextlib
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty
from typing import Any, Protocol

__all__ = ["CellResult", "Host", "HostError", "KernelHost", "ScriptHost", "host_environment"]

_TAIL_LINES = 40


class HostError(RuntimeError):
    """A subject's cell failed, its host died, or a cell ran past its time limit."""


@dataclass
class CellResult:
    """What one cell gave back.

    Attributes:
        value: the value of the cell's expression (``None`` when it had none).
        lines: ``(time.time() at arrival, stream name, text)`` of every output message the
            client received while the cell ran (kernels only; a script host logs to a file).
    """

    value: Any
    lines: list[tuple[float, str, str]] = field(default_factory=list)


class Host(Protocol):
    """A process that runs cells for one subject."""

    name: str

    def submit(self, code: str, expression: str | None = None) -> None:
        """Start running ``code`` (then evaluating ``expression``); collect with :meth:`wait`."""
        ...

    def wait(self, timeout: float = 300.0) -> CellResult:
        """The result of the submitted cell; raises :class:`HostError`."""
        ...

    def run(self, code: str, expression: str | None = None, timeout: float = 300.0) -> CellResult:
        """Run ``code``, then return the value of ``expression``; raise :class:`HostError`."""
        ...

    def close(self) -> None:
        """End the host and everything it started (idempotent)."""
        ...


def host_environment(**extra: str) -> dict[str, str]:
    """This process's environment without launch variables, with the repository importable."""
    dropped = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in dropped
        and not k.startswith(("MASTER_", "TORCHELASTIC_", "NBACCEL_", "ACCELERATE_"))
    }
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def _tail(text: str) -> str:
    lines = text.splitlines()[-_TAIL_LINES:]
    return "\n".join("    " + line for line in lines) if lines else "    (nothing)"


class ScriptHost:
    """A plain Python process (``python -m benchmarks.runner``) in its own session.

    Its stdout and stderr (and those of every process a launcher starts from it) go to a log
    file, whose end is quoted when something fails.
    """

    def __init__(self, name: str, env: dict[str, str]) -> None:
        self.name = name
        self.conn, child = multiprocessing.Pipe()
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the host
            prefix="nbaccel-bench-runner-", suffix=".log", delete=False
        )
        root = Path(__file__).resolve().parent.parent
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.runner", str(child.fileno())],
                pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=root,
                start_new_session=True,  # signals meant for the benchmark's group miss it
            )
        finally:
            child.close()

    def output_tail(self) -> str:
        """The last lines the host and its children printed."""
        try:
            return _tail(Path(self._log.name).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return "    (no log)"

    def run(self, code: str, expression: str | None = None, timeout: float = 300.0) -> CellResult:
        self.submit(code, expression)
        return self.wait(timeout)

    def submit(self, code: str, expression: str | None = None) -> None:
        try:
            self.conn.send((code, expression))
        except (BrokenPipeError, ConnectionError, EOFError, OSError) as exc:
            raise self._died(f"could not be reached ({type(exc).__name__})") from None

    def wait(self, timeout: float = 300.0) -> CellResult:
        try:
            ready = self.conn.poll(timeout)
        except (BrokenPipeError, ConnectionError, EOFError, OSError) as exc:
            raise self._died(f"could not be reached ({type(exc).__name__})") from None
        if not ready:
            self.close(kill=True)
            raise HostError(
                f"{self.name}: the cell did not finish within {timeout:.0f} s; the host was "
                f"stopped. Its last output:\n{self.output_tail()}"
            )
        try:
            status, value = self.conn.recv()
        except (EOFError, ConnectionError, OSError):
            raise self._died("ended while running a cell") from None
        if status != "ok":
            raise HostError(
                f"{self.name}: the cell failed:\n{value}\nThe host's last output:\n"
                f"{self.output_tail()}"
            )
        return CellResult(value)

    def _died(self, what: str) -> HostError:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        code = self.process.poll()
        how = "is still running" if code is None else f"exit status {code}"
        if code is not None and code < 0:
            how = f"killed by signal {-code}"
        return HostError(
            f"{self.name}: the host process {what} ({how}). Its last output:\n{self.output_tail()}"
        )

    def close(self, kill: bool = False) -> None:
        """Ask the host to end (``kill``: at once); then kill whatever is left of its session."""
        if self.process.poll() is None and not kill:
            with contextlib.suppress(Exception):
                self.conn.send(None)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)  # the host, if it hangs, and strays
        self.process.wait()
        with contextlib.suppress(Exception):
            self.conn.close()
        with contextlib.suppress(OSError):
            self._log.close()
            os.unlink(self._log.name)


class KernelHost:
    """A real IPython kernel (``jupyter_client.KernelManager``, this interpreter)."""

    def __init__(self, name: str, env: dict[str, str]) -> None:
        from jupyter_client.manager import KernelManager

        self.name = name
        self._recent: deque[str] = deque(maxlen=_TAIL_LINES)
        self._pending: tuple[str, str | None] | None = None
        root = Path(__file__).resolve().parent.parent
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the host
            prefix="nbaccel-bench-kernel-", suffix=".log", delete=False
        )
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(
            env=env, cwd=str(root), stdout=self._log, stderr=subprocess.STDOUT
        )
        self.client = self.manager.client()
        self.client.start_channels()
        self._ready = False

    def _wait_ready(self) -> None:
        if self._ready:
            return
        try:
            self.client.wait_for_ready(timeout=120)
        except RuntimeError as exc:
            raise HostError(
                f"{self.name}: the kernel did not start: {exc}\n{self.output_tail()}"
            ) from None
        self._ready = True

    def output_tail(self) -> str:
        """The last lines the kernel's cells printed, then the end of the kernel's own log."""
        try:
            log = Path(self._log.name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            log = ""
        return _tail("".join(self._recent)) + "\n  kernel process log:\n" + _tail(log)

    def run(self, code: str, expression: str | None = None, timeout: float = 300.0) -> CellResult:
        self.submit(code, expression)
        return self.wait(timeout)

    def submit(self, code: str, expression: str | None = None) -> None:
        self._wait_ready()
        expressions = {"value": expression} if expression else {}
        self._pending = (
            self.client.execute(code, user_expressions=expressions, store_history=False),
            expression,
        )

    def wait(self, timeout: float = 300.0) -> CellResult:
        if self._pending is None:
            raise HostError(f"{self.name}: no cell was submitted")
        (msg_id, expression), self._pending = self._pending, None
        lines = self._collect(msg_id, time.monotonic() + timeout, timeout)
        reply = self._reply(msg_id, timeout)
        content = reply["content"]
        if content["status"] != "ok":
            trace = "\n".join(content.get("traceback", [])) or content.get("evalue", "")
            raise HostError(
                f"{self.name}: the cell failed in the kernel: {content.get('ename')}: "
                f"{content.get('evalue')}\n{_strip_ansi(trace)}\nThe cell's last output:\n"
                f"{self.output_tail()}"
            )
        value = None
        if expression:
            found = content["user_expressions"]["value"]
            if found.get("status") != "ok":
                raise HostError(f"{self.name}: {expression!r} failed: {found.get('evalue')}")
            value = ast.literal_eval(found["data"]["text/plain"])
        return CellResult(value, lines)

    def _collect(
        self, msg_id: str, deadline: float, timeout: float
    ) -> list[tuple[float, str, str]]:
        lines: list[tuple[float, str, str]] = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise HostError(
                    f"{self.name}: the cell did not finish within {timeout:.0f} s; the kernel "
                    f"was shut down. Its last output:\n{self.output_tail()}"
                )
            if not self.manager.is_alive():
                raise HostError(
                    f"{self.name}: the kernel died. Its last output:\n{self.output_tail()}"
                )
            try:
                message = self.client.get_iopub_msg(timeout=min(left, 1.0))
            except Empty:
                continue
            arrived = time.time()
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "stream":
                lines.append((arrived, content["name"], content["text"]))
                self._recent.append(content["text"])
            elif kind == "status" and content["execution_state"] == "idle":
                return lines

    def _reply(self, msg_id: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                reply = self.client.get_shell_msg(timeout=max(deadline - time.monotonic(), 0.1))
            except Empty:
                raise HostError(f"{self.name}: the kernel sent no reply") from None
            if reply.get("parent_header", {}).get("msg_id") == msg_id:
                return dict(reply)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.stop_channels()
        with contextlib.suppress(Exception):
            if self.manager.has_kernel:
                self.manager.shutdown_kernel(now=True)
        with contextlib.suppress(Exception):
            self.manager.cleanup_resources()
        with contextlib.suppress(OSError):
            self._log.close()
            os.unlink(self._log.name)


def _strip_ansi(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
