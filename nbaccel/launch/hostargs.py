"""The ``hosts=`` arguments of a launch (one notebook driving several machines over SSH),
checked before anything starts.

``hosts=["node1", "root@10.0.0.2:2222"]`` names the machines; each entry is what ``ssh``
accepts (a name from ``~/.ssh/config``, a host name or an address), optionally with a user
(``user@``) and a port (``:port``; IPv6 addresses in brackets: ``[2001:db8::1]:22``).
``hosts="slurm"`` takes the nodes of the SLURM allocation the notebook runs in
(``slurmhosts.py``), ``hosts="ray"`` the nodes of the Ray cluster it joins (``rayhosts.py``;
there ``num_nodes`` says how many). The rules of an entry are ``config/hosts.py``'s, which
the config file's ``hosts`` keys share; ``hosts=None`` takes the config file's,
``hosts=False`` runs on this machine whatever the file says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..config.hosts import (
    DEFAULT_CONNECT_TIMEOUT,
    HostTarget,
    check_connect_timeout,
    check_no_machines,
    check_path_text,
    host_targets,
    is_ray,
    is_slurm,
)
from .rayhosts import RayNodes, choose_nodes, connect
from .slurmhosts import current_allocation

__all__ = ["DEFAULT_CONNECT_TIMEOUT", "HostTarget", "HostsSettings", "check_hosts_settings"]

_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class HostsSettings:
    """Everything ``hosts=`` brings with it (``LaunchConfig.hosts``).

    Attributes:
        targets: the machines, in order; machine ``i`` runs ranks ``i*n .. i*n+n-1``.
        python: the interpreter on every host (None: this kernel's ``sys.executable``).
        cwd: the ranks' working directory on every host (None: this kernel's).
        env: extra variables for every rank.
        connect_timeout: seconds ssh may take to reach a host.
        cpu: ``cpu=True`` was passed (else the hosts' GPUs decide, see ``hoststart.py``).
        slurm_job: ``hosts="slurm"``: the job whose nodes ``targets`` are; the agents start as
            its steps with srun instead of over ssh.
        ray: ``hosts="ray"``: the cluster's nodes ``targets`` are; the agents start as Ray
            actors there, in a placement group (``parent/rayagents.py``).
    """

    targets: tuple[HostTarget, ...]
    python: str | None = None
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    cpu: bool = False
    slurm_job: str | None = None
    ray: RayNodes | None = None

    def host_of(self, rank: int, per_host: int) -> str:
        """The ``hosts=`` entry that runs global ``rank`` (``per_host`` ranks on each)."""
        return self.targets[rank // per_host].entry

    @property
    def via(self) -> str:
        """What reaches the hosts: ``"srun"``, ``"ray"`` or ``"ssh"``."""
        if self.ray is not None:
            return "ray"
        return "srun" if self.slurm_job is not None else "ssh"


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
    ``raw``); None without ``hosts`` (or with ``hosts=False``), where the other four must be
    left out too.

    Raises:
        TypeError / ValueError: a bad value, naming the argument and what is accepted.
    """
    hosts = raw.pop("hosts", None)
    extra = {key: raw.pop(key, None) for key in ("python", "cwd", "env", "connect_timeout")}
    if hosts is None or hosts is False:
        given = [key for key, value in extra.items() if value is not None]
        if given:
            raise ValueError(
                f"{', '.join(given)} only apply to a launch on other machines; pass hosts=[...] "
                "as well, or leave them out."
            )
        return None
    ray_nodes = raw.pop("num_nodes", None) if is_ray(hosts) else None
    check_no_machines(
        raw.get("num_nodes", 1),
        raw.get("node_rank", 0),
        ("num_nodes", "node_rank"),
        "pass hosts=False to start only this machine's ranks (hosts= may come from the config "
        "file in force)",
    )
    timeout = check_connect_timeout("connect_timeout", extra["connect_timeout"])
    python, cwd, env = (
        check_path_text("python", extra["python"]),
        check_path_text("cwd", extra["cwd"]),
        _env(extra["env"]),
    )
    if is_slurm(hosts):
        allocation = current_allocation()
        targets = tuple(HostTarget(node, node) for node in allocation.nodes)
        return HostsSettings(targets, python, cwd, env, timeout, bool(cpu), allocation.job_id)
    if is_ray(hosts):
        nodes = choose_nodes(connect(timeout), _num_nodes(ray_nodes), _per_node(raw), cpu)
        return HostsSettings(nodes.targets, python, cwd, env, timeout, not nodes.gpus, ray=nodes)
    return HostsSettings(host_targets(hosts), python, cwd, env, timeout, cpu=bool(cpu))


def _num_nodes(value: Any) -> int | None:
    """``num_nodes`` with ``hosts="ray"``: how many of the cluster's nodes (None: all)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f'num_nodes={value!r}: with hosts="ray" it is the number of the Ray cluster\'s '
            "nodes to run on (an int >= 1), or None for every node with the resources asked."
        )
    return value


def _per_node(raw: dict[str, Any]) -> int:
    """The ranks per node asked so far (``num_processes`` is checked again with the rest)."""
    value = raw.get("num_processes")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return 1
    return value
