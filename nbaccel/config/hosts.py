"""The machines a launch starts from this notebook (``hosts``): the grammar of a host entry and
the checks of the settings that come with it.

One set of rules for ``notebook_launcher(hosts=, python=, cwd=, connect_timeout=)``
(``launch/hostargs.py``), the config file's ``hosts``, ``hosts_python``, ``hosts_cwd`` and
``hosts_connect_timeout`` keys (``schema.py``), ``nbaccel launch --hosts`` and the config
panel's hosts field. An entry is what ``ssh`` accepts (a name from ``~/.ssh/config``, a host
name or an address), optionally with a user (``user@``) and a port (``:port``; IPv6 addresses
in brackets: ``[2001:db8::1]:22``); ``"slurm"`` names the nodes of the SLURM allocation the
notebook runs in, ``"ray"`` the nodes of the Ray cluster the notebook joins, each resolved
when a launch starts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..validation import is_number
from .values import ValueProblem

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "RAY",
    "SLURM",
    "HostTarget",
    "as_key",
    "check_connect_timeout",
    "check_file_hosts",
    "check_no_machines",
    "check_path_text",
    "host_targets",
    "hosts_setting",
    "hosts_text",
    "is_ray",
    "is_slurm",
    "ray_num_nodes",
]

DEFAULT_CONNECT_TIMEOUT = 30.0
SLURM = "slurm"
RAY = "ray"

# what ssh takes as a host: names, aliases, IPv4 and (bracketed) IPv6 addresses
_HOST = re.compile(r"^[A-Za-z0-9_.\-]+$|^\[[0-9A-Fa-f:.%A-Za-z]+\]$")
_USER = re.compile(r"^[A-Za-z0-9_.\-]+$")


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


def is_slurm(value: Any) -> bool:
    """True for ``"slurm"`` (any case, spaces around): the nodes of the SLURM allocation."""
    return isinstance(value, str) and value.strip().lower() == SLURM


def is_ray(value: Any) -> bool:
    """True for ``"ray"`` (any case, spaces around): the nodes of the joined Ray cluster."""
    return isinstance(value, str) and value.strip().lower() == RAY


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


def host_targets(value: Any) -> tuple[HostTarget, ...]:
    """The machines of a list of host entries, checked: each a host ssh can reach, each once.

    Raises:
        TypeError / ValueError: naming the entry and what is accepted.
    """
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise TypeError(
            f"hosts must be a list of host names such as ['node1', 'node2'], \"slurm\" for "
            f"the nodes of this notebook's SLURM allocation or \"ray\" for a Ray cluster's; "
            f"got {type(value).__name__} ({value!r})."
        )
    if not value:
        raise ValueError("hosts=[] names no machine; name at least one, e.g. hosts=['node1'].")
    targets = tuple(_target(entry, i) for i, entry in enumerate(value))
    seen: set[tuple[str | None, str, int | None]] = set()
    for target in targets:
        key = (target.user, target.host, target.port)
        if key in seen:
            raise ValueError(
                f"hosts names {target.entry!r} twice; name each machine once (num_processes "
                "is the number of processes on each)."
            )
        seen.add(key)
    return targets


def hosts_setting(value: Any) -> list[str] | str | None:
    """``hosts`` as a setting (a config file's key, a command-line flag, the panel's field):
    a list of entries, ``"node1,node2"`` (commas between entries), ``"slurm"`` or ``"ray"``;
    None, ``""`` and ``[]`` mean no hosts. Returns the entries as written (spaces removed),
    ``"slurm"``, ``"ray"``, or None.

    Raises:
        TypeError / ValueError: an entry ssh cannot take, or one named twice.
    """
    if value is None or (isinstance(value, (str, list, tuple)) and not value):
        return None
    if is_slurm(value):
        return SLURM
    if is_ray(value):
        return RAY
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
        if not value:
            return None
    return [target.entry for target in host_targets(value)]


def hosts_text(value: list[str] | str | None) -> str:
    """A ``hosts`` setting as one line: ``"node1, node2"``, ``"slurm"``, ``"ray"`` or ``""``."""
    if value is None:
        return ""
    return value if isinstance(value, str) else ", ".join(value)


def check_path_text(name: str, value: Any) -> str | None:
    """A path on the hosts (an interpreter, a directory): a non-empty string, or None."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise TypeError(f"{name} must be a non-empty path string or None, got {value!r}.")
    return value.strip()


def check_connect_timeout(name: str, value: Any) -> float:
    """Seconds ssh may take to reach a host: a positive number (None: the default, 30)."""
    if value is None:
        return DEFAULT_CONNECT_TIMEOUT
    if not is_number(value) or value <= 0:
        raise ValueError(
            f"{name}={value!r} is not allowed; it must be a positive number of seconds."
        )
    return float(value)


def check_no_machines(num: Any, rank: Any, names: tuple[str, str], undo: str) -> None:
    """Refuse several machines meeting by themselves (``num > 1`` or ``rank > 0``, under
    ``names``) beside ``hosts``, which starts every machine from here; ``undo`` says how to
    drop the hosts instead.

    Raises:
        ValueError: naming both settings and what to do.
    """
    if num in (1, None) and rank in (0, None):
        return
    raise ValueError(
        f"hosts starts every machine from this notebook, so {names[0]} and {names[1]} do not "
        f"apply: leave them at 1 and 0 (two hosts are two machines), or {undo}."
    )


def check_file_hosts(hosts: Any, num_machines: int, machine_rank: int) -> None:
    """A config file's ``hosts`` beside its ``num_machines`` / ``machine_rank``: the rule of
    :func:`check_no_machines`, except that beside ``hosts: ray`` ``num_machines`` is the number
    of the Ray cluster's nodes (:func:`ray_num_nodes`; ``machine_rank`` stays 0).

    Raises:
        ValueProblem: at the key ``hosts``, naming the settings and what to do.
    """
    if is_ray(hosts):
        if machine_rank in (0, None):
            return
        raise ValueProblem(
            f"is ray: every node of the Ray cluster is started from this notebook, so "
            f"machine_rank={machine_rank} does not apply; leave machine_rank at 0 (num_machines "
            "is the number of the cluster's nodes to take), or remove hosts",
            key="hosts",
        )
    undo = "remove hosts (--hosts '' on the command line)"
    try:
        check_no_machines(num_machines, machine_rank, ("num_machines", "machine_rank"), undo)
    except ValueError as exc:
        raise ValueProblem(str(exc).removeprefix("hosts ").rstrip("."), key="hosts") from None


def ray_num_nodes(hosts: Any, num_machines: int | None) -> int | None:
    """The Ray nodes a setting's ``num_machines`` asks for beside ``hosts: ray`` (the config
    file's key, ``nbaccel launch --num_machines``, the panel's Machines), as the launcher's
    ``num_nodes``: ``num_machines`` above 1; None (every alive node that fits) for 1, the
    default that every file nbaccel writes holds. None without ``hosts: ray``."""
    if not is_ray(hosts) or num_machines is None or num_machines <= 1:
        return None
    return num_machines


def as_key(check: Callable[..., Any], *names: str, number: bool = False) -> Callable[[Any], Any]:
    """``check(*names, value)`` as the parser of a config file's key: its error becomes the
    key's :class:`ValueProblem`; with ``number``, a number written as text (a command-line
    flag) is taken as the number."""

    def parse(value: Any) -> Any:
        if number and isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                pass  # refused by check, in its words
        try:
            return check(*names, value)
        except (TypeError, ValueError) as exc:
            raise ValueProblem(f"is not valid: {str(exc).rstrip('.')}") from None

    return parse
