"""The bed's OpenSSH files: host keys, sshd configs, the client key, known_hosts, ssh_config.

Each node runs ``sshd -D -f <its config>``, listening on its own address only: node1 on port
22, node2 on 22 and 2222 (the ``host:port`` form). Public keys only, no passwords, no PAM; root
may log in with a key (``prohibit-password``). Authorized keys are looked up per user in the
bed's directory, so only root has one and ``someone@node1`` is refused.

The client side is a home directory (``home/.ssh/{config,id_ed25519,known_hosts}``, 0700 and
0600) whose config names ``node1``, ``node2`` and ``node2-alt`` (node2's port 2222), with the
real host keys in known_hosts and strict checking on: what a person's ``~/.ssh/config`` on a
cluster's login node holds.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.hosts.bed_net import ADDRESSES, NODES

PORTS = {"node1": (22,), "node2": (22, 2222)}
ALIASES = {"node1": ("node1", 22), "node2": ("node2", 22), "node2-alt": ("node2", 2222)}
# privilege separation's empty chroot, compiled into Debian's sshd; the package's tmpfiles.d
# makes it at boot, and a container may not have it
PRIVSEP_DIR = Path("/run/sshd")


def keygen(path: Path, comment: str) -> None:
    """A new ed25519 key pair at ``path`` (private, 0600) and ``path``.pub."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )


def _write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


class SshFiles:
    """Writes every file the nodes' sshd and the login machine's ssh client read."""

    def __init__(self, root: Path, home: Path) -> None:
        self.root = root / "ssh"
        self.dot_ssh = home / ".ssh"
        self.config = self.dot_ssh / "config"
        self.key = self.dot_ssh / "id_ed25519"
        self.known_hosts = self.dot_ssh / "known_hosts"

    def sshd_config(self, node: str) -> Path:
        return self.root / node / "sshd_config"

    def write(self) -> None:
        self.dot_ssh.mkdir(mode=0o700, parents=True)
        keygen(self.key, "hosts-bed-client")
        authorized = self.root / "authorized_keys"
        authorized.mkdir(mode=0o700, parents=True)
        _write(authorized / "root", self.key.with_suffix(".pub").read_text())
        known = []
        for node in NODES:
            (self.root / node).mkdir(mode=0o700)
            host_key = self.root / node / "ssh_host_ed25519_key"
            keygen(host_key, node)
            public = " ".join(host_key.with_suffix(".pub").read_text().split()[:2])
            # every name the client may be given: alias, address, and "[name]:port" off port 22
            names = [
                name if port == 22 else f"[{name}]:{port}"
                for port in PORTS[node]
                for name in (node, ADDRESSES[node])
            ]
            known.append(f"{','.join(names)} {public}\n")
            _write(self.sshd_config(node), self._sshd_config(node, host_key, authorized))
        _write(self.known_hosts, "".join(known))
        _write(self.config, self._client_config())

    def _sshd_config(self, node: str, host_key: Path, authorized: Path) -> str:
        listen = "".join(f"ListenAddress {ADDRESSES[node]}:{port}\n" for port in PORTS[node])
        return (
            f"{listen}"
            f"HostKey {host_key}\n"
            f"PidFile {self.root / node / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {authorized}/%u\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\n"
            "UsePAM no\n"
            # StrictModes walks up to / and refuses /tmp (mode 1777) above the bed's own 0700 dir
            "StrictModes no\n"
            "X11Forwarding no\n"
            "PrintMotd no\n"
            "LogLevel INFO\n"
        )

    def _client_config(self) -> str:
        hosts = "".join(
            f"Host {alias}\n  HostName {ADDRESSES[node]}\n  Port {port}\n"
            for alias, (node, port) in ALIASES.items()
        )
        # shared by the aliases and by plain addresses ("root@203.0.113.12:2222")
        return (
            f"{hosts}"
            "Host *\n"
            "  User root\n"
            f"  IdentityFile {self.key}\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.known_hosts}\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n"
            "  BatchMode yes\n"
            # a lost host is noticed in seconds: on connecting, and on a session already open
            "  ConnectTimeout 5\n"
            "  ServerAliveInterval 2\n"
            "  ServerAliveCountMax 3\n"
            "  LogLevel ERROR\n"
        )


def sshd_argv(config: Path, log: Path) -> list[str]:
    return ["/usr/sbin/sshd", "-D", "-f", str(config), "-E", str(log)]
