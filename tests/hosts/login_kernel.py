"""A real Jupyter kernel on the bed's login machine, the way a notebook runs on a cluster.

Run inside the login namespace (``HostBed.popen`` or, inside a SLURM job,
``HostBed.in_allocation``) as ``python login_kernel.py CWD``: it starts an ipykernel there,
whose environment is the driver's (so SLURM_JOB_ID etc. when in an allocation), prints
``{"ready": true}``, then reads one JSON request per line on stdin (``{"code", "timeout"}``),
runs it as a cell and answers one JSON line with the cell's streams and error. The kernel's
Jupyter ports are on the namespace's loopback, which the test cannot reach: this driver is
the test's hand on the login machine. :class:`LoginKernel` is the test's side of it.
"""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.hosts.bed import HostBed

DRIVER = Path(__file__).resolve()
AGENT = "nbaccel.launch.agent"  # what a host runs; pgrep finds it by this
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class LoginKernel:
    """The test's side: start the driver on the login machine, send cells, read answers."""

    def __init__(
        self,
        bed: HostBed,
        cwd: Path,
        allocation: int | None = None,
        machine: str = "login",
        **env: str,
    ) -> None:
        """``allocation``: the number of nodes of a job to start the kernel in (None: none);
        ``machine``: where the kernel runs (a node, for a notebook that is one of the hosts)."""
        command = [sys.executable, "-u", str(DRIVER), str(cwd)]
        self.log = open(cwd / "login_kernel.log", "w")  # noqa: SIM115
        pipes: dict[str, Any] = dict(
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True
        )
        if allocation is None:
            self.process = bed.popen(machine, command, env=bed.env(**env), **pipes)
        else:
            self.process = bed.in_allocation(command, allocation, env=bed.env(**env), **pipes)
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        ready = self._next(120)
        assert ready.get("ready"), f"the login kernel did not start: {ready}"

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(json.dumps({"ended": self.process.wait()}))

    def _next(self, timeout: float) -> dict[str, Any]:
        try:
            answer = dict(json.loads(self._lines.get(timeout=timeout)))
        except queue.Empty:
            raise AssertionError(f"the login kernel did not answer in {timeout}s") from None
        if "ended" in answer:
            self.log.flush()
            tail = Path(self.log.name).read_text()[-3000:]
            raise AssertionError(f"the login kernel's driver ended ({answer}):\n{tail}")
        return answer

    def run(self, code: str, timeout: float = 120) -> dict[str, Any]:
        """Run one cell; its ``stdout``, ``stderr``, ``error`` and ``status``."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"code": code, "timeout": timeout}) + "\n")
        self.process.stdin.flush()
        return self._next(timeout + 30)

    def ok(self, code: str, timeout: float = 180) -> str:
        """Run one cell that must not fail; its stdout and stderr."""
        done = self.run(code, timeout=timeout)
        error, out, err = done["error"], done["stdout"], done["stderr"]
        assert error is None, f"{error}\nstdout:\n{out}\n{err}"
        return str(out) + str(err)

    def stop(self) -> None:
        """End the kernel (closing stdin ends the driver; with it the allocation)."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def agents_left_after(seconds: float) -> list[str]:
    """The host agents (and their ranks) still running once ``seconds`` passed or none was
    left (every machine of the bed shares one process table)."""
    deadline = time.monotonic() + seconds
    while True:
        found = subprocess.run(["pgrep", "-f", AGENT], capture_output=True, text=True)
        if not found.stdout.split() or time.monotonic() > deadline:
            return found.stdout.split()
        time.sleep(0.5)


def _cell(client: Any, manager: Any, code: str, timeout: float) -> dict[str, Any]:
    streams: dict[str, list[str]] = {"stdout": [], "stderr": []}
    answer: dict[str, Any] = {"error": None, "status": "ok"}
    displays: list[dict[str, Any]] = []

    def hook(message: dict[str, Any]) -> None:
        kind, content = message["msg_type"], message["content"]
        if kind == "stream":
            streams[content["name"]].append(content["text"])
        elif kind == "error":
            trace = _ANSI.sub("", "\n".join(content["traceback"]))
            answer["error"] = {"ename": content["ename"], "traceback": trace}
        elif kind == "execute_result":
            streams["stdout"].append(content["data"].get("text/plain", "") + "\n")
        elif kind in ("display_data", "update_display_data"):
            displays.append({"kind": kind, "data": content["data"]})
        elif kind == "comm_msg":  # a widget's update (a progress bar's value)
            displays.append({"kind": kind, "state": content["data"].get("state", {})})

    try:
        reply = client.execute_interactive(code, timeout=timeout, output_hook=hook)
        answer["status"] = reply["content"]["status"]
    except TimeoutError:
        manager.interrupt_kernel()
        answer["status"] = "timeout"
    answer.update({name: "".join(parts) for name, parts in streams.items()})
    answer["displays"] = displays
    return answer


def main() -> int:
    from jupyter_client.manager import KernelManager

    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(cwd=sys.argv[1])
    client = manager.blocking_client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            request = json.loads(line)
            answer = _cell(client, manager, request["code"], float(request["timeout"]))
            print(json.dumps(answer), flush=True)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
