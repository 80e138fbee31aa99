"""The two-machine test bed: two network namespaces joined by veth pairs, a kernel in each.

Machine 0 has 192.0.2.1 and machine 1 192.0.2.2 (TEST-NET-1, RFC 5737) on the first link, and
198.51.100.1 / 198.51.100.2 (TEST-NET-2) on a second one; the addresses exist only inside the
namespaces and nothing is routed anywhere else. Each namespace has its own hosts file
(``/etc/netns/<name>/hosts``, which ``ip netns exec`` mounts over ``/etc/hosts``) naming the
machines ``main-machine`` and ``second-machine``, and its own directory standing for its disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

ADDRESSES = ("192.0.2.1", "192.0.2.2")
SECOND = ("198.51.100.1", "198.51.100.2")
NAMES = ("main-machine", "second-machine")
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")
    return done.stdout


class Bed:
    """Two namespaces, two links, two disks; :meth:`destroy` removes every trace."""

    def __init__(self, root: Path) -> None:
        tag = f"nbm{os.getpid() % 100000}"
        self.ns = (f"{tag}m0", f"{tag}m1")
        self.links = ((f"{tag}a0", f"{tag}a1"), (f"{tag}b0", f"{tag}b1"))
        self.disks = (root / "disk0", root / "disk1")
        self.machines: list[Machine] = []

    def create(self) -> None:
        """Build the namespaces; a clear test failure (never a skip) where that is refused."""
        try:
            self._build()
            return
        except Exception as exc:
            self.destroy()
            reason = str(exc)
        pytest.fail(
            "The multinode tier builds two network namespaces joined by veth pairs and "
            f"could not: {reason}. It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and "
            "iproute2's `ip`; run it as root (CI does).",
            pytrace=False,
        )

    def _build(self) -> None:
        for ns in self.ns:
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            hosts = Path("/etc/netns") / ns
            hosts.mkdir(parents=True, exist_ok=True)
            entries = "".join(f"{a} {n}\n" for a, n in zip(ADDRESSES, NAMES, strict=True))
            (hosts / "hosts").write_text(f"127.0.0.1 localhost\n{entries}")
        for pair, addresses in zip(self.links, (ADDRESSES, SECOND), strict=True):
            _ip("link", "add", pair[0], "type", "veth", "peer", "name", pair[1])
            for ns, dev, address in zip(self.ns, pair, addresses, strict=True):
                _ip("link", "set", dev, "netns", ns)
                _ip("-n", ns, "addr", "add", f"{address}/24", "dev", dev)
                _ip("-n", ns, "link", "set", dev, "up")
        for disk in self.disks:
            disk.mkdir(parents=True, exist_ok=True)

    def link(self, up: bool) -> None:
        """Plug the first link's cable in or pull it out (both ends)."""
        for ns, dev in zip(self.ns, self.links[0], strict=True):
            _ip("-n", ns, "link", "set", dev, "up" if up else "down")

    def listening(self, machine: int) -> list[tuple[str, int]]:
        """``(address, port)`` of every TCP socket listening in that machine's namespace."""
        out = subprocess.run(
            ["ip", "netns", "exec", self.ns[machine], "ss", "-Hltn"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        found = []
        for line in out.splitlines():
            local = line.split()[3]
            address, _, port = local.rpartition(":")
            found.append((address.strip("[]").split("%")[0], int(port)))
        return found

    def pids(self, machine: int) -> list[int]:
        """Processes running inside that machine's namespace."""
        with contextlib.suppress(RuntimeError):
            return [int(p) for p in _ip("netns", "pids", self.ns[machine]).split()]
        return []

    def destroy(self) -> None:
        """Stop every process in the namespaces, then remove namespaces, links and hosts files."""
        for machine in self.machines:
            machine.stop()
        for index in range(2):
            for pid in self.pids(index):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(self.pids(i) for i in range(2)) and time.monotonic() < deadline:
            time.sleep(0.1)
        for ns in self.ns:
            with contextlib.suppress(RuntimeError):
                _ip("netns", "del", ns)  # its veth ends go with it
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)

    def leftovers(self) -> list[str]:
        """What the bed left behind: namespaces, links, hosts files (empty when clean)."""
        left = [ns for ns in self.ns if ns in _ip("netns", "list")]
        devices = _ip("-o", "link", "show")
        left += [dev for pair in self.links for dev in pair if f" {dev}@" in devices]
        left += [
            str(Path("/etc/netns") / ns) for ns in self.ns if (Path("/etc/netns") / ns).exists()
        ]
        return left


class Machine:
    """A Jupyter kernel running inside one namespace (see machine_kernel.py)."""

    def __init__(self, bed: Bed, index: int, env: dict[str, str]) -> None:
        self.index = index
        self.log = open(bed.disks[index].parent / f"kernel{index}.log", "w")  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                *("ip", "netns", "exec", bed.ns[index], sys.executable, "-u"),
                *(str(HERE / "machine_kernel.py"), str(bed.disks[index])),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        bed.machines.append(self)
        ready = self._next(180)
        assert ready.get("ready"), f"machine {index}'s kernel did not start: {ready}"

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)

    def _next(self, timeout: float) -> dict[str, Any]:
        try:
            return dict(json.loads(self._lines.get(timeout=timeout)))
        except queue.Empty:
            raise AssertionError(f"machine {self.index} did not answer in {timeout}s") from None

    def submit(self, code: str, timeout: float = 120) -> None:
        """Start running ``code`` as a cell (answer with :meth:`result`)."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"code": code, "timeout": timeout}) + "\n")
        self.process.stdin.flush()

    def result(self, timeout: float = 150) -> dict[str, Any]:
        """The cell's ``stdout``, ``stderr``, ``error`` and ``status``."""
        return self._next(timeout)

    def run(self, code: str, timeout: float = 120) -> dict[str, Any]:
        """Run one cell and wait for it."""
        self.submit(code, timeout)
        return self.result(timeout + 30)

    def stop(self) -> None:
        """End the kernel (its workers are stopped by the bed)."""
        with contextlib.suppress(Exception):
            assert self.process.stdin is not None
            self.process.stdin.close()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def run_both(machines: list[Machine], codes: list[str], timeout: float = 120) -> list[dict]:
    """Run one cell on each machine at the same time; their answers in machine order."""
    for machine, code in zip(machines, codes, strict=True):
        machine.submit(code, timeout)
    return [machine.result(timeout + 30) for machine in machines]
