"""Drive a real Jupyter kernel from a test: start, run cells, watch their output, interrupt, stop.

The notebook, pool, faults and gpu tiers use these helpers. A :class:`Kernel` wraps one
``KernelManager`` and its ``BlockingKernelClient``; :meth:`Kernel.execute` runs a cell and
returns a :class:`Cell` with every stream message (and when it arrived), the error and the
reply. :meth:`Kernel.submit` and :meth:`Kernel.collect` split that in two so a test can act
while the cell is still running (interrupt it, or react to a line it printed).
"""

from __future__ import annotations

import contextlib
import os
import re
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from queue import Empty
from typing import Any

import psutil
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from tests.support.snapshot import ProcessSnapshot

__all__ = [
    "BANNER",
    "KERNEL_NAME",
    "Cell",
    "Display",
    "Kernel",
    "KernelDied",
    "Output",
    "ProcessSnapshot",
    "click_button",
    "kernel_env",
    "pids_alive",
    "running_kernel",
    "strip_ansi",
    "wait_gone",
    "widget_buttons",
]

# The kernel spec every test of the tier starts: "python3" (this interpreter) unless
# NBACCEL_TEST_KERNEL names another, e.g. "nbaccel-colab", the Colab-like environment's kernel
# that tests/colab/make_env.sh installs (tests/run.sh's "colab" tier).
KERNEL_NAME = os.environ.get("NBACCEL_TEST_KERNEL", "python3")
# The line notebook_launcher prints before it starts the workers.
BANNER = re.compile(r"^Launching \d+ processes\b")
_BANNER_METHOD = re.compile(r"\bwith (fork|spawn)\b")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Variables that would tell nbaccel it is already inside a launch, or turn on debug mode, and
# VIRTUAL_ENV: a kernel runs its own environment's interpreter (a test that wants another venv
# active passes it explicitly).
_DROPPED = re.compile(
    r"^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|NODE_RANK|ROLE_RANK|"
    r"ROLE_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_.*|OMPI_COMM_WORLD_.*|PMI_.*|"
    r"MPI_LOCAL.*|NBACCEL_.*|ACCELERATE_.*|PJRT_DEVICE|TPU_.*|COLAB_TPU_ADDR|"
    r"IPYKERNEL_CELL_NAME|VIRTUAL_ENV)$"
)


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour codes (IPython colours its tracebacks)."""
    return _ANSI.sub("", text)


def kernel_env(**extra: str) -> dict[str, str]:
    """The environment for a test kernel: this one without launch variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not _DROPPED.match(k)}
    env.update(extra)
    return env


@dataclass
class Output:
    """One ``stream`` message of a cell, with the (monotonic) time the test received it."""

    name: str
    text: str
    at: float


@dataclass
class Display:
    """One rich-output message of a cell (``display_data``, ``update_display_data``,
    ``clear_output`` or a widget's ``comm_msg``), with the (monotonic) time it arrived."""

    kind: str
    content: dict[str, Any]
    at: float

    @property
    def data(self) -> dict[str, Any]:
        return dict(self.content.get("data", {}))

    @property
    def display_id(self) -> str | None:
        return self.content.get("transient", {}).get("display_id")

    @property
    def rank(self) -> int | None:
        """The rank nbaccel's launcher put in the metadata (None: not from a worker)."""
        return self.content.get("metadata", {}).get("nbaccel", {}).get("rank")


@dataclass
class Cell:
    """What one executed cell produced."""

    msg_id: str
    started: float
    outputs: list[Output] = field(default_factory=list)
    displays: list[Display] = field(default_factory=list)
    status: str = ""
    execution_count: int | None = None
    ename: str = ""
    evalue: str = ""
    traceback: list[str] = field(default_factory=list)
    reply_ename: str = ""
    finished: float | None = None
    idle: bool = False
    # The cell's protocol messages, in order: "status:busy", "execute_input", "error",
    # "status:idle" (outputs and widget messages left out), also those after its first idle.
    trace: list[str] = field(default_factory=list)

    def text(self, name: str = "stdout") -> str:
        """Everything the cell wrote to one stream, in order."""
        return "".join(o.text for o in self.outputs if o.name == name)

    @property
    def stdout(self) -> str:
        return self.text("stdout")

    @property
    def stderr(self) -> str:
        return self.text("stderr")

    def lines(self, name: str = "stdout", banner: bool = False) -> list[str]:
        """The lines of one stream; the launcher's banner line is left out unless asked for."""
        lines = self.text(name).splitlines()
        return lines if banner else [line for line in lines if not BANNER.match(line)]

    def banner_methods(self) -> list[str]:
        """The start method named by each launcher banner the cell printed, in order."""
        found = []
        for line in self.lines(banner=True):
            match = _BANNER_METHOD.search(line) if BANNER.match(line) else None
            if match:
                found.append(match.group(1))
        return found

    @property
    def error_text(self) -> str:
        """The cell's traceback as plain text (empty when the cell did not fail)."""
        return strip_ansi("\n".join(self.traceback))

    def describe(self) -> str:
        """A summary for assertion messages."""
        return (
            f"status={self.status!r} ename={self.ename!r} evalue={self.evalue[:500]!r}\n"
            f"--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-3000:]}\n"
            f"--- traceback ---\n{self.error_text[-4000:]}"
        )


class KernelDied(AssertionError):
    """The kernel process ended while a cell ran (e.g. it aborted)."""


class Kernel:
    """One real IPython kernel and a blocking client connected to it."""

    def __init__(self, manager: KernelManager, client: BlockingKernelClient) -> None:
        self.manager = manager
        self.client = client
        self._cells: dict[str, Cell] = {}  # every submitted cell, to record all it receives
        self._replies: dict[str, dict[str, Any]] = {}

    @property
    def pid(self) -> int:
        """The kernel process's pid."""
        process = getattr(self.manager.provisioner, "process", None)
        assert process is not None, "the kernel is not running"
        return int(process.pid)

    def submit(self, code: str, stop_on_error: bool = True, subshell: str | None = None) -> Cell:
        """Send a cell for execution and return at once (collect it with :meth:`collect`).

        ``stop_on_error`` (the protocol's flag, True as a front end sends it): when the cell
        fails, the kernel aborts the requests queued behind it. ``subshell``: run it in that
        subshell of the kernel (:meth:`subshell`), beside a cell the main shell runs."""
        if subshell is None:
            msg_id = self.client.execute(
                textwrap.dedent(code), store_history=True, stop_on_error=stop_on_error
            )
        else:
            content = {
                "code": textwrap.dedent(code),
                "silent": False,
                "store_history": False,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": stop_on_error,
            }
            message = self.client.session.msg("execute_request", content)
            message["header"]["subshell_id"] = subshell
            self.client.shell_channel.send(message)
            msg_id = message["header"]["msg_id"]
        cell = self._cells[msg_id] = Cell(msg_id=msg_id, started=time.monotonic())
        return cell

    def subshell(self) -> str | None:
        """A new subshell of the kernel (ipykernel 7 and later run a subshell's cells on a
        thread of their own, while the main shell is busy); None where the kernel has none."""
        self.client.kernel_info()
        info = self.client.get_shell_msg(timeout=30)["content"]
        if "kernel subshells" not in info.get("supported_features", []):
            return None
        self.client.control_channel.send(self.client.session.msg("create_subshell_request", {}))
        reply = self.client.get_control_msg(timeout=30)["content"]
        return str(reply["subshell_id"]) if reply.get("status") == "ok" else None

    def collect(
        self,
        cell: Cell,
        timeout: float = 60.0,
        on_message: Callable[[dict[str, Any], Cell], None] | None = None,
    ) -> Cell:
        """Read the cell's iopub messages until it is idle, then its reply.

        ``on_message(message, cell)`` is called for every iopub message of this cell as it
        arrives (``cell`` holds what came before it), while the cell may still be running.
        """
        deadline = time.monotonic() + timeout
        while not cell.idle:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the cell did not finish within {timeout}s:\n{cell.describe()}")
            try:
                message = self.client.get_iopub_msg(timeout=min(left, 1.0))
            except Empty:
                if not self.manager.is_alive():
                    raise KernelDied(
                        f"the kernel died while the cell ran:\n{cell.describe()}"
                    ) from None
                continue
            owner = self._cells.get(message.get("parent_header", {}).get("msg_id", ""))
            if owner is not None:
                self._record(message, owner)  # a queued cell's messages are kept for it
            if owner is not cell:
                continue
            if on_message is not None:
                on_message(message, cell)
        while cell.msg_id not in self._replies:
            left = max(deadline - time.monotonic(), 0.1)
            reply = self.client.get_shell_msg(timeout=left)
            self._replies[reply.get("parent_header", {}).get("msg_id", "")] = reply
        content = self._replies.pop(cell.msg_id)["content"]
        cell.status = content["status"]
        cell.execution_count = content.get("execution_count")
        cell.reply_ename = content.get("ename", "")
        if cell.status == "error" and not cell.ename:
            cell.ename, cell.evalue = content.get("ename", ""), content.get("evalue", "")
            cell.traceback = list(content.get("traceback", []))
        return cell

    @staticmethod
    def _record(message: dict[str, Any], cell: Cell) -> None:
        kind, content = message["msg_type"], message["content"]
        now = time.monotonic()
        if kind == "status":
            cell.trace.append(f"status:{content['execution_state']}")
        elif kind in ("execute_input", "error"):
            cell.trace.append(kind)
        if kind == "stream":
            cell.outputs.append(Output(content["name"], content["text"], now))
        elif kind in ("display_data", "update_display_data", "clear_output", "comm_msg"):
            cell.displays.append(Display(kind, dict(content), now))
        elif kind == "error":
            cell.ename, cell.evalue = content["ename"], content["evalue"]
            cell.traceback = list(content["traceback"])
        elif kind == "status" and content["execution_state"] == "idle" and not cell.idle:
            cell.idle, cell.finished = True, now

    def execute(
        self,
        code: str,
        timeout: float = 60.0,
        on_message: Callable[[dict[str, Any], Cell], None] | None = None,
    ) -> Cell:
        """Run a cell to the end (see :meth:`collect`).

        Nothing is queued behind a cell run this way, so it is sent with
        ``stop_on_error=False``: ipykernel 6 (Colab's) otherwise keeps aborting, for a moment
        after a failing cell's reply, requests that arrive then, and the test's next cell,
        sent at once, would never run (a person's next click never comes that fast)."""
        return self.collect(self.submit(code, stop_on_error=False), timeout, on_message)

    def ok(self, code: str, timeout: float = 60.0) -> Cell:
        """Run a cell that must succeed; return it.

        ipykernel 6 (Colab's) aborts every request that reaches it in the moment after it
        replied with an error to a cell sent with ``stop_on_error`` (:meth:`submit`'s
        default); a cell sent right then can land there on a loaded machine (a user's next
        click never does). Such a cell, which never ran, is sent once more."""
        cell = self.execute(code, timeout)
        if cell.status == "aborted":
            time.sleep(0.2)
            cell = self.execute(code, timeout)
        assert cell.status == "ok", cell.describe()
        return cell

    def value(self, expression: str) -> str:
        """``repr`` of a Python expression evaluated in the kernel, as printed there."""
        cell = self.ok(f"print(repr({expression}))")
        return cell.stdout.strip()

    def settle(self) -> None:
        """Let the kernel release what it holds for finished threads, as it would by itself.

        ipykernel gives every thread that writes output (the launcher's output relay thread)
        its own zmq socket and closes those of ended threads in a periodic collection every
        10 s. Run that collection now, on ipykernel's own IO thread, so that a snapshot of the
        kernel's descriptors does not depend on the timing of it.
        """
        self.ok(
            """
            _iopub = getattr(get_ipython().kernel, "iopub_thread", None)
            if _iopub is not None and hasattr(_iopub, "_event_pipe_gc"):
                _iopub.io_loop.add_callback(_iopub._event_pipe_gc)
            del _iopub
            """
        )
        time.sleep(0.3)

    def interrupt(self) -> None:
        """Interrupt the running cell, as the notebook's stop button does."""
        self.manager.interrupt_kernel()

    def shutdown(self, now: bool = True) -> None:
        """Stop the client channels and the kernel (idempotent)."""
        with contextlib.suppress(Exception):
            self.client.stop_channels()
        with contextlib.suppress(Exception):
            if self.manager.has_kernel:
                self.manager.shutdown_kernel(now=now)
        with contextlib.suppress(Exception):
            self.manager.cleanup_resources()


@contextlib.contextmanager
def running_kernel(log_path: str | None = None, **env: str) -> Iterator[Kernel]:
    """Start a real kernel (the :data:`KERNEL_NAME` spec); always shut it down.

    With ``log_path``, the kernel process's own stdout and stderr (its log) go to that file.
    """
    manager = KernelManager(kernel_name=KERNEL_NAME)
    if log_path is None:
        manager.start_kernel(env=kernel_env(**env))
    else:
        with open(log_path, "wb") as log:
            manager.start_kernel(env=kernel_env(**env), stdout=log, stderr=log)
    kernel = Kernel(manager, manager.client())
    try:
        kernel.client.start_channels()
        kernel.client.wait_for_ready(timeout=60)
        yield kernel
    finally:
        kernel.shutdown()


def widget_buttons(message: dict[str, Any], found: dict[str, str]) -> None:
    """Record ``description -> comm id`` of every ipywidgets Button opened in ``message``."""
    if message["msg_type"] != "comm_open":
        return
    state = message["content"].get("data", {}).get("state", {})
    if state.get("_model_name") == "ButtonModel":
        found[state.get("description", "")] = message["content"]["comm_id"]


def click_button(kernel: Kernel, comm_id: str) -> None:
    """Send what the browser sends for a click on a Button (ipywidgets' ``custom`` message)."""
    content = {"comm_id": comm_id, "data": {"method": "custom", "content": {"event": "click"}}}
    kernel.client.shell_channel.send(kernel.client.session.msg("comm_msg", content))


def pids_alive(pids: list[int]) -> list[int]:
    """The pids in ``pids`` that name a live (not zombie) process."""
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait up to ``timeout`` s for every pid to end; return those still alive."""
    deadline = time.monotonic() + timeout
    alive = pids_alive(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = pids_alive(alive)
    return alive
