"""The ``hosts=`` arguments of a launch (one notebook driving several machines over SSH),
checked before anything starts.

``hosts=["node1", "root@10.0.0.2:2222"]`` names the machines; each entry is what ``ssh``
accepts (a name from ``~/.ssh/config``, a host name or an address), optionally with a user
(``user@``) and a port (``:port``; IPv6 addresses in brackets: ``[2001:db8::1]:22``).
``hosts="slurm"`` takes the nodes of the SLURM allocation the notebook runs in
(``slurmhosts.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..validation import is_number
from .slurmhosts import current_allocation

__all__ = ["DEFAULT_CONNECT_TIMEOUT", "HostTarget", "HostsSettings", "check_hosts_settings"]

DEFAULT_CONNECT_TIMEOUT = 30.0

# what ssh takes as a host: names, aliases, IPv4 and (bracketed) IPv6 addresses
_HOST = re.compile(r"^[A-Za-z0-9_.\-]+$|^\[[0-9A-Fa-f:.%A-Za-z]+\]$")
_USER = re.compile(r"^[A-Za-z0-9_.\-]+$")
_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class HostTarget:
    """One machine of ``hosts=``, as ssh is to reach it.

    Attributes:
        entry: the entry as written (what messages show).
        host: the host name, alias or address (brackets removed).
        user: the login name, or None (ssh's own choice: ``~/.ssh/config`` or the local user).
        port: the ssh port, or None (ssh's own choice).
    """

    entry: str
    host: str
    user: str | None = None
    port: int | None = None

    @property
    def destination(self) -> str:
        """``[user@]host`` as ssh's destination argument."""
        return f"{self.user}@{self.host}" if self.user else self.host

    def ssh_options(self) -> list[str]:
        """``-p port`` where a port was named."""
        return ["-p", str(self.port)] if self.port is not None else []


@dataclass(frozen=True)
class HostsSettings:
    """Everything ``hosts=`` brings with it (``LaunchConfig.hosts``).

    Attributes:
        targets: the machines, in order; machine ``i`` runs ranks ``i*n .. i*n+n-1``.
        python: the interpreter on every host (None: this kernel's ``sys.executable``).
        cwd: the ranks' working directory on every host (None: this kernel's).
        env: extra variables for every rank.
        connect_timeout: seconds ssh may take to reach a host.
        cpu: ``cpu=True`` was passed (else the hosts' GPUs decide, see ``hostplan.py``).
        slurm_job: ``hosts="slurm"``: the job whose nodes ``targets`` are; the agents start as
            its steps with srun instead of over ssh.
    """

    targets: tuple[HostTarget, ...]
    python: str | None = None
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    cpu: bool = False
    slurm_job: str | None = None

    def host_of(self, rank: int, per_host: int) -> str:
        """The ``hosts=`` entry that runs global ``rank`` (``per_host`` ranks on each)."""
        return self.targets[rank // per_host].entry

    @property
    def via(self) -> str:
        """The command that reaches the hosts: ``"srun"`` or ``"ssh"``."""
        return "srun" if self.slurm_job is not None else "ssh"


def _target(entry: Any, index: int) -> HostTarget:
    if not isinstance(entry, str) or not entry.strip():
        raise TypeError(
            f"hosts[{index}]={entry!r} must be a non-empty string such as 'node1', "
            "'user@node1' or 'node1:2222'."
        )
    text = entry.strip()
    user, at, rest = text.rpartition("@")
    if at and not _USER.match(user):
        raise ValueError(f"hosts[{index}]={entry!r} has a bad user name {user!r}.")
    host, port_text = rest, None
    if rest.startswith("["):  # [IPv6]:port
        close = rest.find("]")
        host, tail = rest[: close + 1], rest[close + 1 :]
        if close < 0 or (tail and not tail.startswith(":")):
            raise ValueError(f"hosts[{index}]={entry!r}: write an IPv6 address as '[addr]:port'.")
        port_text = tail[1:] if tail else None
    elif rest.count(":") == 1:
        host, port_text = rest.split(":")
    port = None
    if port_text is not None:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError(
                f"hosts[{index}]={entry!r} has the port {port_text!r}; a port is a number "
                "from 1 to 65535, e.g. 'node1:2222'."
            )
        port = int(port_text)
    if not host or not _HOST.match(host) or host.startswith("-"):
        raise ValueError(
            f"hosts[{index}]={entry!r} is not a host ssh can reach: write a name from "
            "~/.ssh/config, a host name or an address, optionally 'user@host:port'."
        )
    return HostTarget(text, host.strip("[]"), user or None, port)


def _targets(value: Any) -> tuple[HostTarget, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise TypeError(
            f"hosts must be a list of host names such as ['node1', 'node2'], or \"slurm\" for "
            f"the nodes of this notebook's SLURM allocation; got {type(value).__name__} "
            f"({value!r})."
        )
    if not value:
        raise ValueError("hosts=[] names no machine; name at least one, e.g. hosts=['node1'].")
    targets = tuple(_target(entry, i) for i, entry in enumerate(value))
    seen: dict[tuple[str | None, str, int | None], str] = {}
    for target in targets:
        key = (target.user, target.host, target.port)
        if key in seen:
            raise ValueError(
                f"hosts names {target.entry!r} twice; name each machine once (num_processes "
                "is the number of processes on each)."
            )
        seen[key] = target.entry
    return targets


def _text(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise TypeError(f"{name} must be a non-empty path string or None, got {value!r}.")
    return value.strip()


def _env(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"env must be a dict of variable names to strings, got {value!r}.")
    out = {}
    for key, item in value.items():
        if not isinstance(key, str) or not _VAR.match(key):
            raise ValueError(f"env has the bad variable name {key!r}; use names like 'MY_VAR'.")
        if not isinstance(item, (str, int, float)) or isinstance(item, bool):
            raise TypeError(f"env[{key!r}]={item!r} must be a string (or a number).")
        out[key] = str(item)
    return out


def check_hosts_settings(raw: dict[str, Any], cpu: bool | None) -> HostsSettings | None:
    """The checked ``hosts``, ``python``, ``cwd``, ``env`` and ``connect_timeout`` (popped from
    ``raw``); None without ``hosts``, where the other four must be left out too.

    Raises:
        TypeError / ValueError: a bad value, naming the argument and what is accepted.
    """
    hosts = raw.pop("hosts", None)
    extra = {key: raw.pop(key, None) for key in ("python", "cwd", "env", "connect_timeout")}
    if hosts is None:
        given = [key for key, value in extra.items() if value is not None]
        if given:
            raise ValueError(
                f"{', '.join(given)} only apply to a launch on other machines; pass hosts=[...] "
                "as well, or leave them out."
            )
        return None
    if raw.get("num_nodes", 1) not in (1, None) or raw.get("node_rank", 0) not in (0, None):
        raise ValueError(
            "hosts= starts every machine from this notebook, so num_nodes and node_rank do not "
            "apply; leave them out (hosts=['node1', 'node2'] is two machines)."
        )
    timeout = extra["connect_timeout"]
    if timeout is None:
        timeout = DEFAULT_CONNECT_TIMEOUT
    if not is_number(timeout) or timeout <= 0:
        raise ValueError(
            f"connect_timeout={timeout!r} is not allowed; it must be a positive number of seconds."
        )
    python, cwd, env = (
        _text("python", extra["python"]),
        _text("cwd", extra["cwd"]),
        _env(extra["env"]),
    )
    if isinstance(hosts, str) and hosts.strip().lower() == "slurm":
        allocation = current_allocation()
        targets = tuple(HostTarget(node, node) for node in allocation.nodes)
        return HostsSettings(
            targets, python, cwd, env, float(timeout), bool(cpu), allocation.job_id
        )
    return HostsSettings(_targets(hosts), python, cwd, env, float(timeout), cpu=bool(cpu))
