"""The Ray bed: a real Ray cluster on three machines (network namespaces), for the tests of a
notebook that runs on a Ray cluster's head.

``RayBed`` builds the hosts bed's three machines (:class:`tests.hosts.bed_net.Network`, prefix
``nbr``: ``login`` 203.0.113.1 with the bridge, ``node1`` .11, ``node2`` .12), then starts
``ray start --head --num-cpus=0`` on ``login`` (GCS, dashboard, the head's raylet: it holds no
CPU, so every rank goes to a node) and ``ray start --num-cpus=1`` on ``node1`` and ``node2``,
each with ``--block`` (a foreground child the bed owns) and a temp dir of its own under the
bed's directory (``/tmp/nbr-ray-XXXXXXXX/<machine>``: never the shared ``/tmp/ray``), and waits
until a driver on ``login`` sees the three nodes alive (a :class:`BedError` naming the machine
and quoting the end of its logs otherwise).

A test drives the login machine, where a notebook's kernel runs: :meth:`RayBed.popen` /
:meth:`RayBed.run` start commands on a machine with :meth:`RayBed.env` (``RAY_ADDRESS``, the
test's Python first on PATH, the checkout on PYTHONPATH), so ``tests.hosts.login_kernel.
LoginKernel(bed, cwd)`` starts a real Jupyter kernel there. :meth:`RayBed.cut` /
:meth:`RayBed.plug` pull and plug a node's cable, :meth:`RayBed.kill_node` kills a machine
(every process of its namespace), :meth:`RayBed.restart_node` brings it back as a fresh Ray
node. :meth:`RayBed.close` kills everything in the namespaces (``ray stop`` would only find
what its own temp dir names) and removes every trace, even after a failed start.

Usage::

    with RayBed() as bed:
        bed.run("login", ["python", "-c", "import ray; ray.init(); print(ray.nodes())"])
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from tests.hosts.bed_net import ADDRESSES, MACHINES, NODES, BedError, Network
from tests.support.beds import all_pids, identities, ns_pids, signal_group
from tests.support.paths import pythonpath

__all__ = ["ADDRESSES", "HEAD_ADDRESS", "MACHINES", "NODES", "BedError", "RayBed"]

PREFIX = "nbr"  # the hosts bed is "nbh" (its lifecycle tests "nbt"): its namespaces are others
GCS_PORT = 6379
HEAD_ADDRESS = f"{ADDRESSES['login']}:{GCS_PORT}"
READY_TIMEOUT = 60.0
OBJECT_STORE_BYTES = 100 * 1024 * 1024  # per node (Ray's least is 75 MiB; default: 30% of RAM)
BIN = Path(sys.executable).parent  # the Python running the tests, and its `ray`
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The GCS health-checks every raylet: by default a first check after 5 s, then one every 3 s,
# each failing after 10 s, and a node is dead after 5 failures in a row (30 s and more for a
# cut cable). These make it 1 s / 1 s / 3 failures: a cut node is dead in about 3 to 4 s, a
# killed one (its connections refused at once) in about 3 s. Set on the head, the GCS's own.
HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 1000,
    "health_check_period_ms": 1000,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 3,
}
# run on `login` as `python -c NODES_SCRIPT WANT TIMEOUT`: a driver that prints the machines
# of the alive nodes as JSON once they are WANT (a JSON list of addresses, or null: now) or
# TIMEOUT seconds passed (exit status 3 then)
_NODES_SCRIPT = """
import json, logging, os, sys, time
import ray
want, deadline = json.loads(sys.argv[1]), time.monotonic() + float(sys.argv[2])
ray.init(address=os.environ["RAY_ADDRESS"], logging_level=logging.ERROR, log_to_driver=False)
while True:
    alive = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
    if want is None or alive == sorted(want) or time.monotonic() > deadline:
        print(); print("ALIVE", json.dumps(alive), flush=True)  # a line of its own
        sys.exit(0 if want is None or alive == sorted(want) else 3)
    time.sleep(0.25)
"""
_MACHINE_OF = {address: machine for machine, address in ADDRESSES.items()}


class RayBed:
    """The bed; ``prefix`` names its namespaces (``<prefix>-login``...), one bed per prefix."""

    def __init__(
        self,
        prefix: str = PREFIX,
        ready_timeout: float = READY_TIMEOUT,
        object_store_bytes: int = OBJECT_STORE_BYTES,
    ) -> None:
        self.prefix = prefix
        self.ready_timeout = ready_timeout
        self.object_store_bytes = object_store_bytes
        self.net = Network(prefix)
        self.root = Path()
        self.nodes: dict[str, subprocess.Popen[bytes]] = {}  # machine -> its `ray start --block`
        self._started: list[subprocess.Popen[Any]] = []
        self._lock: TextIO | None = None
        self._seen: set[tuple[int, str]] = set()  # (pid, start time) of each process it had
        self.setup_seconds = self.teardown_seconds = 0.0

    # --- paths --------------------------------------------------------------------------------

    @property
    def home(self) -> Path:
        """Root's home on every machine (HOME, and the home /etc/netns/<ns>/passwd names)."""
        return self.root / "home"

    def temp_dir(self, machine: str) -> Path:
        """``machine``'s Ray temp dir (``--temp-dir``): its ``session_*/logs``, ``sockets``."""
        return self.root / machine

    def log(self, machine: str) -> Path:
        """What ``ray start`` printed on ``machine``."""
        return self.root / "logs" / f"{machine}.out"

    # --- set-up and tear-down -----------------------------------------------------------------

    def __enter__(self) -> RayBed:
        self.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def start(self) -> None:
        """Build the machines, start the cluster and wait for its three nodes; on any failure
        remove it all, then raise."""
        begin = time.monotonic()
        self._take_lock()
        try:
            self._clear_stale()
            # short: Ray's unix sockets live under <temp dir>/session_<date>_<pid>/sockets/,
            # and a socket's path has at most 107 characters
            self.root = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-ray-", dir="/tmp"))
            (self.root / "logs").mkdir()
            self.home.mkdir(mode=0o700)
            self.net.create(self.home)
            self._start_node("login")
            self._wait_until(self._gcs_listens, "no GCS listened on login")
            for node in NODES:
                self._start_node(node)
            self.wait_alive(MACHINES, self.ready_timeout)
        except BaseException:
            with contextlib.suppress(Exception):  # the first error is the one to see
                self.close()
            raise
        self.setup_seconds = time.monotonic() - begin

    def _take_lock(self) -> None:
        # one live bed per prefix; holding it also proves that any namespace of that prefix
        # still there is a killed run's leftover, which start() clears
        lock = open(f"/run/nbaccel-ray-{self.prefix}.lock", "a")  # noqa: SIM115
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise BedError(f"another Ray bed with prefix {self.prefix!r} is running") from None
        self._lock = lock

    def _clear_stale(self) -> None:
        self.net.kill_all()
        self.net.destroy()
        for old in Path("/tmp").glob(f"{self.prefix}-ray-*"):
            shutil.rmtree(old, ignore_errors=True)

    def _start_node(self, machine: str) -> None:
        """``ray start --block`` on ``machine``, in a fresh temp dir: the head on ``login``."""
        temp = self.temp_dir(machine)
        shutil.rmtree(temp, ignore_errors=True)  # a restarted node's old sockets and logs
        temp.mkdir()
        common = [
            *(str(BIN / "ray"), "start", "--block", "--disable-usage-stats"),
            f"--node-ip-address={ADDRESSES[machine]}",
            f"--temp-dir={temp}",
            f"--object-store-memory={self.object_store_bytes}",
        ]
        if machine == "login":
            argv = [
                *common,
                *("--head", f"--port={GCS_PORT}", "--num-cpus=0"),
                # the state API (ray.util.state.list_actors...) is the dashboard's StateHead:
                # without it a driver gets "Failed to connect to API server"
                "--include-dashboard=true",
                f"--system-config={json.dumps(HEALTH_CHECKS)}",
            ]
        else:
            argv = [*common, f"--address={HEAD_ADDRESS}", "--num-cpus=1"]
        env = self.env()
        del env["RAY_ADDRESS"]  # a head with RAY_ADDRESS set would look for that cluster
        with open(self.log(machine), "ab") as sink:
            self.nodes[machine] = subprocess.Popen(
                self.net.argv(machine, argv),
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # the test run's Ctrl-C is for close() to handle
            )

    def close(self) -> None:
        """Kill every process of the namespaces (Ray's and the tests'), then remove the
        namespaces, their files and the bed's directory. A bed that never held its lock has
        nothing to remove (another bed may be running)."""
        if self._lock is None:
            return
        begin = time.monotonic()
        live = [process for process in self._processes() if process.poll() is None]
        self._seen |= identities([*self.net.pids(), *(process.pid for process in live)])
        survivors = self.net.kill_all()
        for process in live:  # anything started outside the namespaces' reach
            signal_group(process, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
        self.net.destroy()
        if self.root != Path():
            shutil.rmtree(self.root, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(self._lock.name)
        self._lock.close()
        self._lock = None
        self.nodes, self._started = {}, []
        self.teardown_seconds = time.monotonic() - begin
        if survivors:
            raise BedError(f"processes in the bed's namespaces survived SIGKILL: {survivors}")

    def leftovers(self) -> list[str]:
        """What the bed left behind (empty once closed): namespaces, /etc/netns files, its
        directory, processes."""
        left = self.net.leftovers()
        if self.root != Path() and self.root.exists():
            left.append(str(self.root))
        left += [f"process {pid}" for pid, _ in self._seen & identities(all_pids())]
        return left

    def _processes(self) -> list[subprocess.Popen[Any]]:
        return [*self._started, *self.nodes.values()]

    # --- driving the machines -----------------------------------------------------------------

    def env(self, base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
        """The environment of a command on a machine: ``base`` (default: this process's) less
        any outer RAY_* setting, with the test's Python's bin first on PATH, RAY_ADDRESS = the
        head, HOME = the bed's home and the checkout on PYTHONPATH; then ``extra``."""
        base = os.environ if base is None else base
        env = {k: v for k, v in base.items() if not k.startswith("RAY_")}
        env["PATH"] = os.pathsep.join(filter(None, [str(BIN), env.get("PATH"), SYSTEM_PATH]))
        env.update(
            RAY_ADDRESS=HEAD_ADDRESS,
            HOME=str(self.home),
            PYTHONPATH=pythonpath(environ=base),
            LANG=env.get("LANG", "C.UTF-8"),
        )
        env.update(extra)
        return env

    def argv(self, machine: str, command: Sequence[str]) -> list[str]:
        """``command`` as run on ``machine`` (namespace and hostname), for a Popen of one's own."""
        return self.net.argv(machine, list(command))

    def popen(self, machine: str, command: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``command`` on ``machine`` (env: :meth:`env`); close() stops it."""
        kwargs.setdefault("env", self.env())
        kwargs.setdefault("start_new_session", True)
        process = subprocess.Popen(self.argv(machine, command), **kwargs)
        self._started.append(process)
        return process

    def run(
        self, machine: str, command: Sequence[str], timeout: float = 60, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        """Run ``command`` on ``machine`` to the end; its output as text (never raises on rc;
        raises subprocess.TimeoutExpired past ``timeout``, the command killed)."""
        kwargs.setdefault("env", self.env())
        kwargs.setdefault("capture_output", True)
        return subprocess.run(self.argv(machine, command), text=True, timeout=timeout, **kwargs)

    def python(self, machine: str, code: str, *args: str, timeout: float = 60) -> str:
        """Run ``python -c code args`` on ``machine``; its stdout (a BedError if it fails)."""
        command = [sys.executable, "-c", code, *args]
        try:
            done = self.run(machine, command, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise BedError(f"python on {machine} did not end within {timeout:.0f}s") from None
        if done.returncode != 0:
            raise BedError(
                f"python on {machine} exited with {done.returncode}:\n{done.stderr[-3000:]}"
            )
        return done.stdout

    # --- the cluster as the GCS sees it ---------------------------------------------------------

    def alive(self) -> list[str]:
        """The machines of the cluster's alive nodes, sorted (a machine twice: two nodes)."""
        return self._alive(None, timeout=30)

    def nodes_alive(self) -> int:
        """How many nodes the GCS has alive (a driver on ``login`` asks ``ray.nodes()``)."""
        return len(self.alive())

    def wait_alive(self, machines: Iterable[str], timeout: float) -> None:
        """Wait until the alive nodes are exactly ``machines`` (one node each); a BedError
        quoting the machines' logs after ``timeout`` seconds."""
        want = sorted(machines)
        try:
            got = self._alive([ADDRESSES[m] for m in want], timeout)
        except BedError as exc:
            raise BedError(f"{exc}\n{self.tails()}") from None
        if got != want:
            raise BedError(
                f"the alive nodes were {got}, not {want}, after {timeout:.0f}s\n{self.tails()}"
            )

    def _alive(self, want: list[str] | None, timeout: float) -> list[str]:
        """The machines alive once they are ``want`` (addresses; None: now) or ``timeout``
        passed; a BedError at once if the ``ray start`` of a machine waited for ends."""
        wanted = [m for m in self.nodes if want is not None and ADDRESSES[m] in want]
        self._check_running(wanted)
        command = [sys.executable, "-c", _NODES_SCRIPT, json.dumps(want), str(timeout)]
        driver = self.popen("login", command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # ray.init waits a minute for a GCS it cannot reach: a deadline of its own
        deadline = time.monotonic() + timeout + 30
        while True:
            try:
                out, err = (text.decode(errors="replace") for text in driver.communicate(None, 0.2))
                break
            except subprocess.TimeoutExpired:
                try:
                    self._check_running(wanted)
                    if time.monotonic() > deadline:
                        raise BedError(f"a driver on login did not answer in {timeout + 30:.0f}s")
                except BedError:
                    signal_group(driver, signal.SIGKILL)
                    driver.wait()
                    raise
        # Ray prints its own news on a driver's stdout too, before and after ours ("The node
        # with node id: ... has been marked dead", "raylet has lagging heartbeats ..."): the
        # answer is the line that starts with ALIVE
        lines = [line[len("ALIVE ") :] for line in out.splitlines() if line.startswith("ALIVE ")]
        if driver.returncode not in (0, 3) or not lines:
            raise BedError(
                f"a driver on login asking for the nodes exited with {driver.returncode}:\n"
                f"{err[-3000:]}"
            )
        return sorted(_MACHINE_OF.get(address, address) for address in json.loads(lines[-1]))

    def _gcs_listens(self) -> bool:
        return GCS_PORT in {port for _, port in self.net.listening("login")}  # on 0.0.0.0

    def _check_running(self, machines: Iterable[str]) -> None:
        """A BedError if the ``ray start`` of one of ``machines`` has ended."""
        for machine in machines:
            code = self.nodes[machine].poll()
            if code is not None:
                raise BedError(f"`ray start` on {machine} exited with code {code}\n{self.tails()}")

    def _wait_until(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while not ready():
            self._check_running(self.nodes)
            if time.monotonic() > deadline:
                raise BedError(f"{what} within {self.ready_timeout:.0f}s\n{self.tails()}")
            time.sleep(0.1)

    def tails(self, lines: int = 15) -> str:
        """The end of each machine's ``ray start`` output and of its raylet's (and on ``login``
        the GCS's) log."""
        parts = []
        for machine in MACHINES:
            logs = self.temp_dir(machine) / "session_latest" / "logs"
            for path in (self.log(machine), logs / "gcs_server.out", logs / "raylet.out"):
                if path.exists() and path.stat().st_size:
                    text = path.read_text(errors="replace").splitlines()[-lines:]
                    body = "\n".join(f"    {line}" for line in text)
                    parts.append(f"{machine}: the end of {path.name}:\n{body}")
        return "\n".join(parts) or "no node wrote a log"

    # --- faults ---------------------------------------------------------------------------------

    def cut(self, node: str) -> None:
        """Pull ``node``'s network cable: its processes run on, unreachable."""
        self.net.set_link(node, up=False)

    def plug(self, node: str) -> None:
        """Plug ``node``'s cable back in (a raylet that the GCS declared dead meanwhile exits
        when it hears so: :meth:`restart_node` brings the node back)."""
        self.net.set_link(node, up=True)

    def kill_node(self, node: str, timeout: float = 10) -> None:
        """The machine dies: SIGKILL every process of ``node``'s namespace (Ray's and any a
        test started there)."""
        ns = self.net.ns[node]
        deadline = time.monotonic() + timeout
        while pids := ns_pids(ns):
            self._seen |= identities(pids)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise BedError(f"processes on {node} survived SIGKILL: {pids}")
            time.sleep(0.05)
        process = self.nodes.get(node)
        if process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)

    def restart_node(self, node: str, timeout: float | None = None) -> None:
        """Bring ``node`` back as a fresh Ray node (whatever is left of it killed, its cable
        plugged, a new temp dir) and wait until the cluster has its three nodes again, the old
        one of ``node`` declared dead."""
        self.kill_node(node)
        # the GCS must first declare the old node dead: until then it counts as alive under
        # the same address, so a wait for "the three machines" could end before the new node
        # registers (and a test after see two nodes)
        self.wait_alive([m for m in MACHINES if m != node], self.ready_timeout)
        self.plug(node)
        self._start_node(node)
        self.wait_alive(MACHINES, self.ready_timeout if timeout is None else timeout)

    # --- costs ----------------------------------------------------------------------------------

    def memory(self) -> dict[str, int]:
        """Bytes resident in the bed's processes: ``rss`` (summed; shared pages count once per
        process) and ``pss`` (shared pages split among their sharers)."""
        rss = pss = 0
        for pid in self.net.pids():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    name, _, value = line.partition(":")
                    if name in ("Rss", "Pss"):
                        kib = int(value.split()[0]) * 1024
                        rss, pss = (rss + kib, pss) if name == "Rss" else (rss, pss + kib)
        return {"rss": rss, "pss": pss}
