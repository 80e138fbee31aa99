"""The hosts bed: a cluster's login node and two compute nodes, with real sshd and real SLURM.

``HostBed`` builds three network namespaces on one bridge (see bed_net), then starts munged
and slurmctld on ``login``, and sshd and slurmd on ``node1`` and ``node2``, each with the bed's
own config files in a 0700 temp directory, and waits for each (a clear error naming the daemon
and the end of its log if one does not come up). A test drives the login machine, where a
notebook's kernel runs on a cluster: :meth:`HostBed.popen` / :meth:`HostBed.run` start
commands there with :meth:`HostBed.env` (SLURM_CONF, PATH, HOME = the bed's home whose
``.ssh/config`` names the nodes), :meth:`HostBed.in_allocation` starts one inside a real
``salloc`` job, and :meth:`HostBed.cut` / :meth:`HostBed.restore` pull and plug a node's
cable. :meth:`HostBed.close` stops everything the bed started and removes every trace, even
after a failed start.

Usage::

    with HostBed() as bed:
        bed.run("login", ["ssh", "node1", "hostname"])  # -> "node1"
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from tests.hosts.bed_net import ADDRESSES, MACHINES, NODES, BedError, Network
from tests.hosts.bed_slurm import SlurmFiles, node_states, slurmctld_argv, slurmd_argv
from tests.hosts.bed_ssh import PORTS, PRIVSEP_DIR, SshFiles, sshd_argv
from tests.support.beds import all_pids, identities, signal_group

__all__ = ["ADDRESSES", "MACHINES", "NODES", "BedError", "HostBed"]

READY_TIMEOUT = 30.0
DAEMON_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# variables of an outer SLURM job or ssh agent that must not leak into the bed's commands
_OUTER = re.compile(r"^(SLURM_.*|SSH_AUTH_SOCK|SSH_AGENT_PID)$")


class Daemon:
    def __init__(self, name: str, process: subprocess.Popen[bytes], log: Path, out: Path) -> None:
        self.name, self.process, self.log, self.out = name, process, log, out

    def tail(self, lines: int = 20) -> str:
        """The end of the daemon's own log, or of what it printed when it has no log yet."""
        for path in (self.log, self.out):
            if path.exists() and path.stat().st_size:
                text = path.read_text(errors="replace").splitlines()[-lines:]
                return f"the end of its log {path.name}:\n" + "\n".join(
                    f"    {line}" for line in text
                )
        return f"nothing in its log {self.log.name} or {self.out.name}"


class HostBed:
    """The bed; ``prefix`` names its namespaces (``<prefix>-login``...), one bed per prefix."""

    def __init__(self, prefix: str = "nbh", ready_timeout: float = READY_TIMEOUT) -> None:
        self.prefix = prefix
        self.ready_timeout = ready_timeout
        self.net = Network(prefix)
        self.root = Path()
        self.daemons: list[Daemon] = []
        self._started: list[subprocess.Popen[Any]] = []
        self._lock: TextIO | None = None
        self._made_privsep = False
        self._seen: set[tuple[int, str]] = set()  # (pid, start time) of each process it had
        self.setup_seconds = self.teardown_seconds = 0.0

    # --- paths a test needs -------------------------------------------------------------------

    @property
    def home(self) -> Path:
        """The login machine's home of root: ``.ssh/config``, ``id_ed25519``, ``known_hosts``."""
        return self.root / "home"

    @property
    def ssh(self) -> SshFiles:
        return SshFiles(self.root, self.home)

    @property
    def ssh_config(self) -> Path:
        return self.ssh.config

    @property
    def slurm(self) -> SlurmFiles:
        return SlurmFiles(self.root)

    # --- set-up and tear-down -----------------------------------------------------------------

    def __enter__(self) -> HostBed:
        self.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def start(self) -> None:
        """Build the machines and start the daemons; on any failure remove it all, then raise."""
        begin = time.monotonic()
        self._take_lock()
        try:
            self._clear_stale()
            self.root = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-bed-"))  # mode 0700
            (self.root / "logs").mkdir()
            self.home.mkdir(mode=0o700)
            self.net.create(self.home)
            self.ssh.write()
            self.slurm.write()
            self._start_daemons()
        except BaseException:
            with contextlib.suppress(Exception):  # the first error is the one to see
                self.close()
            raise
        self.setup_seconds = time.monotonic() - begin

    def _take_lock(self) -> None:
        # one live bed per prefix; holding it also proves that any namespace of that prefix
        # still there is a killed run's leftover, which start() clears. "a+": the file is
        # read, then emptied, only once the lock is ours
        lock = open(f"/run/nbaccel-hosts-{self.prefix}.lock", "a+")  # noqa: SIM115
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise BedError(f"another hosts bed with prefix {self.prefix!r} is running") from None
        lock.seek(0)
        # a killed bed that had made /run/sshd leaves it to this one to remove
        self._made_privsep = lock.read() == "made /run/sshd\n"
        lock.truncate(0)
        self._lock = lock

    def _clear_stale(self) -> None:
        self.net.kill_all()
        self.net.destroy()
        for old in Path(tempfile.gettempdir()).glob(f"{self.prefix}-bed-*"):
            shutil.rmtree(old, ignore_errors=True)

    def _start_daemons(self) -> None:
        if not PRIVSEP_DIR.exists():
            PRIVSEP_DIR.mkdir(mode=0o755)
            self._made_privsep = True
        if self._made_privsep and self._lock is not None:
            self._lock.write("made /run/sshd\n")
            self._lock.flush()
        slurm = self.slurm
        munged = self._daemon("munged", "login", slurm.munged_argv(), own_log=False)
        encode = ["munge", "-n", "-S", str(slurm.socket)]
        self._wait(munged, "a credential from its socket", lambda: self._ok("login", encode))
        for node in NODES:
            log = slurm.log(f"sshd-{node}")
            sshd = self._daemon(f"sshd-{node}", node, sshd_argv(self.ssh.sshd_config(node), log))
            wanted = {(ADDRESSES[node], port) for port in PORTS[node]}
            self._wait(sshd, "listening", functools.partial(self._listening, node, wanted))
        ctld = self._daemon("slurmctld", "login", slurmctld_argv())
        self._wait(ctld, "`scontrol ping`", lambda: self._ok("login", ["scontrol", "ping"]))
        slurmds = [self._daemon(f"slurmd-{node}", node, slurmd_argv()) for node in NODES]
        for node, slurmd in zip(NODES, slurmds, strict=True):
            self._wait(slurmd, "idle in sinfo", functools.partial(self._idle, node))

    def _listening(self, node: str, wanted: set[tuple[str, int]]) -> bool:
        return wanted <= self.net.listening(node)

    def _idle(self, node: str) -> bool:
        return self.node_state(node) == "idle"

    def _daemon(self, name: str, machine: str, argv: list[str], own_log: bool = True) -> Daemon:
        log = self.slurm.log(name)
        out = log.with_suffix(".out") if own_log else log
        with open(out, "wb") as sink:
            process = subprocess.Popen(
                self.net.argv(machine, argv),
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env={"PATH": DAEMON_PATH, "SLURM_CONF": str(self.slurm.conf), "LANG": "C.UTF-8"},
                start_new_session=True,  # the test run's Ctrl-C is for close() to handle
            )
        daemon = Daemon(name, process, log, out)
        self.daemons.append(daemon)
        return daemon

    def _wait(self, daemon: Daemon, what: str, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while True:
            code = daemon.process.poll()
            if code is not None:
                raise BedError(
                    f"{daemon.name} exited with code {code} before {what}; {daemon.tail()}"
                )
            if ready():
                return
            if time.monotonic() > deadline:
                raise BedError(
                    f"{daemon.name} was not ready ({what}) within {self.ready_timeout:.0f}s; "
                    f"{daemon.tail()}"
                )
            time.sleep(0.1)

    def close(self) -> None:
        """Stop every process the bed started, then remove namespaces, files and the temp dir.
        A bed that never held its lock has nothing to remove (another bed may be running)."""
        if self._lock is None:
            return
        begin = time.monotonic()
        live = [process for process in self._processes() if process.poll() is None]
        self._seen |= identities([*self.net.pids(), *(process.pid for process in live)])
        for process in live:  # SIGTERM first: slurmctld saves its state, a kernel shuts down
            signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for process in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
        self._seen |= identities(self.net.pids())
        survivors = self.net.kill_all()  # job steps, ssh sessions, whatever a test left
        for process in live:
            if process.poll() is None:
                signal_group(process, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=5)
        self.net.destroy()
        if self._made_privsep:
            with contextlib.suppress(OSError):
                PRIVSEP_DIR.rmdir()
            self._made_privsep = False
        if self.root != Path():
            shutil.rmtree(self.root, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(self._lock.name)
        self._lock.close()
        self._lock = None
        self.daemons, self._started = [], []
        self.teardown_seconds = time.monotonic() - begin
        if survivors:
            raise BedError(f"processes in the bed's namespaces survived SIGKILL: {survivors}")

    def leftovers(self) -> list[str]:
        """What the bed left behind (empty once closed): namespaces, files, dirs, processes."""
        left = self.net.leftovers()
        if self.root != Path() and self.root.exists():
            left.append(str(self.root))
        if self._made_privsep:
            left.append(str(PRIVSEP_DIR))
        left += [f"process {pid}" for pid, _ in self._seen & identities(all_pids())]
        return left

    def _processes(self) -> list[subprocess.Popen[Any]]:
        return [*self._started, *(daemon.process for daemon in self.daemons)]

    # --- driving the machines -----------------------------------------------------------------

    def env(self, base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
        """The environment for a command on the login machine: ``base`` (this process's) less an
        outer job's SLURM_* and any ssh agent, plus SLURM_CONF, the system's PATH and HOME."""
        env = {
            k: v for k, v in (os.environ if base is None else base).items() if not _OUTER.match(k)
        }
        path = env.get("PATH", "")
        env["PATH"] = f"{path}:{DAEMON_PATH}" if path else DAEMON_PATH
        env.update(SLURM_CONF=str(self.slurm.conf), HOME=str(self.home))
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
        """Run ``command`` on ``machine`` to the end; its output as text (never raises on rc)."""
        kwargs.setdefault("env", self.env())
        kwargs.setdefault("capture_output", True)
        return subprocess.run(self.argv(machine, command), text=True, timeout=timeout, **kwargs)

    def in_allocation(
        self, command: Sequence[str], nodes: int = 2, options: Sequence[str] = (), **kwargs: Any
    ) -> subprocess.Popen[Any]:
        """Start ``command`` on the login machine inside a new job of ``nodes`` nodes, as
        ``salloc -N<nodes> command`` does (and a JupyterHub spawner on a login node): it sees
        SLURM_JOB_ID, SLURM_JOB_NODELIST... of a real allocation, which ends when it exits."""
        salloc = ["salloc", f"--nodes={nodes}", "--quiet", "--immediate=60", *options]
        return self.popen("login", [*salloc, *command], **kwargs)

    def node_state(self, node: str) -> str:
        """The node's state as SLURM sees it ("idle", "allocated", "down*"...), "" if unknown."""
        done = self.run("login", ["sinfo", "-h", "-N", "-o", "%N %T"], timeout=30)
        return node_states(done.stdout).get(node, "") if done.returncode == 0 else ""

    def listening(self, machine: str) -> set[tuple[str, int]]:
        """``(address, port)`` of every TCP listener on ``machine``."""
        return self.net.listening(machine)

    def cut(self, node: str) -> None:
        """Pull ``node``'s network cable: its processes run on, unreachable."""
        self.net.set_link(node, up=False)

    def restore(self, node: str, timeout: float = 60) -> None:
        """Plug it back in, and wait until ssh reaches it and SLURM has it back (not DOWN)."""
        self.net.set_link(node, up=True)
        reach = ["ssh", "-F", str(self.ssh_config), "-o", "ConnectTimeout=2", node, "true"]
        deadline, nudged = time.monotonic() + timeout, 0.0
        while not (
            self.node_state(node) in ("idle", "mixed", "allocated") and self._ok("login", reach)
        ):
            if time.monotonic() > deadline:
                raise BedError(f"{node} did not come back within {timeout:.0f}s of restore()")
            if time.monotonic() - nudged > 3:
                # slurmctld pings a DOWN node only about once a minute; a reconfigure makes
                # every slurmd register at once (ReturnToService=2 then returns it to service)
                self._ok("login", ["scontrol", "reconfigure"])
                nudged = time.monotonic()
            time.sleep(0.2)

    def _ok(self, machine: str, command: list[str]) -> bool:
        try:
            return self.run(machine, command, timeout=15).returncode == 0
        except subprocess.TimeoutExpired:
            return False
