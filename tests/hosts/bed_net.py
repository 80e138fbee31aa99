"""The machines of the hosts bed: three network namespaces on one bridge, each with a hostname.

``login`` (203.0.113.1, TEST-NET-3 of RFC 5737) holds the bridge ``br0``; ``node1`` (.11) and
``node2`` (.12) are plugged into it by veth pairs (``eth0`` on the node, ``port-nodeN`` on the
bridge), so every machine reaches every other and nothing is routed to the root namespace, where
the bed creates no interface at all. Each namespace has its own hosts file
(``/etc/netns/<ns>/hosts``, which ``ip netns exec`` mounts over ``/etc/hosts``) and its own
``passwd`` naming the bed's home as root's home, because ssh finds ``~/.ssh`` through the
password database, never through ``$HOME`` (a kernel on a node uses ssh too).

A namespace carries no hostname, so every process started on a machine goes through
``unshare --uts`` and ``hostname``: ``gethostname()`` says ``node1`` on node1, as slurmd (which
finds its NodeName that way), srun and the tests expect.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

MACHINES = ("login", "node1", "node2")
NODES = ("node1", "node2")
ADDRESSES = {"login": "203.0.113.1", "node1": "203.0.113.11", "node2": "203.0.113.12"}
NETNS_ETC = Path("/etc/netns")
# run as `sh -c SCRIPT HOSTNAME PROGRAM ARGS...`: name the new UTS namespace, then become PROGRAM
_NAME_THEN_EXEC = 'hostname "$0" && exec "$@"'


class BedError(RuntimeError):
    """The bed could not be built or a daemon did not come up (the message says which)."""


def ip(*args: str, check: bool = True) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise BedError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")
    return done.stdout


def listening(out: str) -> set[tuple[str, int]]:
    """``(address, port)`` of each line of ``ss -Hltn``."""
    found = set()
    for line in out.splitlines():
        address, _, port = line.split()[3].rpartition(":")
        found.add((address.strip("[]").split("%")[0], int(port)))
    return found


class Network:
    """The namespaces, the bridge, the links and the per-namespace files in /etc/netns."""

    def __init__(self, prefix: str) -> None:
        self.ns = {machine: f"{prefix}-{machine}" for machine in MACHINES}

    def argv(self, machine: str, command: list[str]) -> list[str]:
        """``command`` run on ``machine``: in its namespace, under its hostname."""
        return [
            *("ip", "netns", "exec", self.ns[machine]),
            *("unshare", "--uts", "--", "sh", "-c", _NAME_THEN_EXEC, machine),
            *command,
        ]

    def create(self, home: Path) -> None:
        for ns in self.ns.values():
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
            etc = NETNS_ETC / ns
            etc.mkdir(parents=True, exist_ok=True)
            names = "".join(f"{address} {name}\n" for name, address in ADDRESSES.items())
            (etc / "hosts").write_text(f"127.0.0.1 localhost\n{names}")
            # root's home is the bed's on every machine: ssh reads ~/.ssh from the password
            # file (a notebook on a node may start ranks on its own node and the others)
            (etc / "passwd").write_text(_passwd_with_home(str(home)))
        login = self.ns["login"]
        ip("-n", login, "link", "add", "name", "br0", "type", "bridge")
        ip("-n", login, "addr", "add", f"{ADDRESSES['login']}/24", "dev", "br0")
        ip("-n", login, "link", "set", "br0", "up")
        for node in NODES:
            # both ends are made inside the namespaces: the root namespace never sees them
            ip(
                *("-n", login, "link", "add", "name", f"port-{node}", "type", "veth"),
                *("peer", "name", "eth0", "netns", self.ns[node]),
            )
            ip("-n", login, "link", "set", f"port-{node}", "master", "br0", "up")
            ip("-n", self.ns[node], "addr", "add", f"{ADDRESSES[node]}/24", "dev", "eth0")
            ip("-n", self.ns[node], "link", "set", "eth0", "up")

    def set_link(self, node: str, up: bool) -> None:
        """Plug ``node``'s cable in or pull it out, at both ends."""
        state = "up" if up else "down"
        ip("-n", self.ns[node], "link", "set", "eth0", state)
        ip("-n", self.ns["login"], "link", "set", f"port-{node}", state)

    def listening(self, machine: str) -> set[tuple[str, int]]:
        """``(address, port)`` of every TCP listener in ``machine``'s namespace."""
        out = subprocess.run(
            ["ip", "netns", "exec", self.ns[machine], "ss", "-Hltn"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        return listening(out)

    def pids(self) -> list[int]:
        """Every process running in one of the bed's namespaces."""
        found: list[int] = []
        for ns in self.ns.values():
            found += [int(pid) for pid in ip("netns", "pids", ns, check=False).split()]
        return found

    def kill_all(self, timeout: float = 10) -> list[int]:
        """SIGKILL every process in the namespaces until none is left; the survivors, if any."""
        deadline = time.monotonic() + timeout
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        return self.pids()

    def destroy(self) -> None:
        """Remove the namespaces (their links and the bridge go with them) and their files."""
        for ns in self.ns.values():
            if ns in self.existing():
                ip("netns", "del", ns, check=False)
            shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)

    def existing(self) -> list[str]:
        names = [line.split()[0] for line in ip("netns", "list", check=False).splitlines() if line]
        return [ns for ns in self.ns.values() if ns in names]

    def leftovers(self) -> list[str]:
        left = [f"namespace {ns}" for ns in self.existing()]
        left += [str(NETNS_ETC / ns) for ns in self.ns.values() if (NETNS_ETC / ns).exists()]
        root_links = ip("-o", "link", "show", check=False)
        left += [f"link {name}" for name in ("port-node1", "port-node2") if name in root_links]
        return left


def _passwd_with_home(home: str) -> str:
    """This machine's /etc/passwd with root's home (the sixth field) replaced by ``home``."""
    lines = []
    for line in Path("/etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if len(fields) == 7 and fields[0] == "root":
            fields[5] = home
        lines.append(":".join(fields))
    return "\n".join(lines) + "\n"
