"""``hosts="ray"``: the nodes of a Ray cluster, chosen before anything starts.

The notebook joins the cluster as Ray itself does: a kernel that already called ``ray.init()``
keeps its connection; otherwise ``RAY_ADDRESS`` names the cluster (its GCS ``host:port``, or a
``ray://`` client address), else ``address="auto"`` finds the one this machine belongs to. A
``host:port`` is tried with a plain TCP connection first, so that an address nobody answers
at fails within ``connect_timeout`` instead of Ray's own minute of retries.

:func:`choose_nodes` takes the alive nodes that hold ``num_processes`` CPUs each (GPUs where
the cluster has GPUs and ``cpu=True`` was not passed), in the order of their addresses, and
keeps ``num_nodes`` of them (all by default). Each attempt or pool generation then reserves
them with a placement group (``parent/rayagents.py``).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..config.hosts import HostTarget
from ..environment import ray_address

__all__ = ["RAY_EXTRA", "RayNode", "RayNodes", "choose_nodes", "connect", "import_ray"]

RAY_EXTRA = 'pip install "nbaccel[ray]"'


@dataclass(frozen=True)
class RayNode:
    """One alive node of the cluster.

    Attributes:
        node_id: Ray's id of the node (hex).
        address: the address its raylet serves at (``NodeManagerAddress``).
        hostname: its host name.
        cpus: its CPUs, as Ray counts them.
        gpus: its GPUs, as Ray counts them.
    """

    node_id: str
    address: str
    hostname: str
    cpus: float
    gpus: float


@dataclass(frozen=True)
class RayNodes:
    """The nodes a launch or pool takes, and what each bundle of its placement group holds.

    Attributes:
        address: the cluster, as the notebook joined it.
        nodes: the chosen nodes, in node-rank order.
        gpus: True where each bundle holds ``per_node`` GPUs, False for CPUs.
        per_node: the ranks on each node (``num_processes``).
    """

    address: str
    nodes: tuple[RayNode, ...]
    gpus: bool
    per_node: int

    @property
    def targets(self) -> tuple[HostTarget, ...]:
        """The nodes as machines of ``hosts=``: messages and prefixes name each by its host
        name, or by its address where two chosen nodes share a host name."""
        names = [node.hostname for node in self.nodes]
        unique = len(set(names)) == len(names)
        return tuple(
            HostTarget(node.hostname if unique else node.address, node.address)
            for node in self.nodes
        )

    def bundle(self, node: RayNode) -> dict[str, float]:
        """The resources one node's bundle reserves, pinned to that node by Ray's own
        ``node:<address>`` resource."""
        unit = "GPU" if self.gpus else "CPU"
        return {unit: float(self.per_node), f"node:{node.address}": 0.001}


def import_ray() -> ModuleType:
    """``ray``, or ``ImportError`` naming the extra that installs it."""
    try:
        import ray  # optional: only hosts="ray" needs it
    except ImportError as exc:
        raise ImportError(
            f'hosts="ray" runs the ranks on the nodes of a Ray cluster, but Ray is not '
            f"installed in this kernel's environment ({exc}). Install it with `{RAY_EXTRA}` "
            "(the same Ray version as the cluster's), then restart the kernel."
        ) from None
    return ray


def connect(connect_timeout: float) -> str:
    """Join the cluster (see the module docstring); its address. ``ConnectionError`` saying
    what was tried where no cluster answers."""
    ray = import_ray()
    if ray.is_initialized():
        return _joined(ray, "the cluster this kernel joined")
    address = ray_address() or "auto"
    if address != "auto" and not address.startswith("ray://"):
        _check_reachable(address, connect_timeout)
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = "RAY_ADDRESS=" + address if address != "auto" else 'address="auto"'
        raise ConnectionError(
            f'hosts="ray": no Ray cluster could be joined at {where}: {exc}. Start one '
            "(`ray start --head` on one machine, `ray start --address=HEAD:6379` on the "
            "others), then call ray.init(address=...) in this notebook or set RAY_ADDRESS "
            "to its head's address before the launch."
        ) from None
    return _joined(ray, address)


def _joined(ray: ModuleType, fallback: str) -> str:
    """The joined cluster's GCS address, for messages (a Ray Client connection may not say)."""
    try:
        return str(ray.get_runtime_context().gcs_address)
    except Exception:  # a ray:// client's context
        return fallback


def _check_reachable(address: str, timeout: float) -> None:
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise ValueError(
            f"RAY_ADDRESS={address!r} is not an address Ray takes: write the head's "
            "'host:port' (e.g. 10.0.0.1:6379), 'ray://host:10001' or 'auto'."
        )
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as exc:
        raise ConnectionError(
            f'hosts="ray": nothing answers at RAY_ADDRESS={address} within {timeout:g}s '
            f"(connect_timeout): {exc}. Check that the head runs (`ray status` there) and "
            "that this machine reaches it."
        ) from None


def _alive_nodes(ray: ModuleType) -> list[RayNode]:
    nodes = []
    for raw in ray.nodes():
        if not raw.get("Alive"):
            continue
        resources: dict[str, Any] = raw.get("Resources", {})
        nodes.append(
            RayNode(
                node_id=str(raw["NodeID"]),
                address=str(raw["NodeManagerAddress"]),
                hostname=str(raw.get("NodeManagerHostname", raw["NodeManagerAddress"])),
                cpus=float(resources.get("CPU", 0)),
                gpus=float(resources.get("GPU", 0)),
            )
        )
    return sorted(nodes, key=_address_order)


def _address_order(node: RayNode) -> tuple[int, Any]:
    try:
        return (0, ipaddress.ip_address(node.address))
    except ValueError:
        return (1, node.address)


def choose_nodes(address: str, num_nodes: int | None, per_node: int, cpu: bool | None) -> RayNodes:
    """The nodes of the joined cluster a launch takes (see the module docstring).

    Raises:
        ValueError: fewer nodes than ``num_nodes`` hold ``per_node`` CPUs (or GPUs), naming
            what the cluster has and what to change.
    """
    ray = import_ray()
    alive = _alive_nodes(ray)
    gpus = not cpu and any(node.gpus > 0 for node in alive)
    unit = "GPU" if gpus else "CPU"
    fits = [node for node in alive if (node.gpus if gpus else node.cpus) >= per_node]
    wanted = len(fits) if num_nodes is None else num_nodes
    if fits and len(fits) >= wanted:
        return RayNodes(address, tuple(fits[:wanted]), gpus, per_node)
    have = ", ".join(
        f"{node.address} ({node.gpus if gpus else node.cpus:g} {unit}s)" for node in alive
    )
    asked = f"num_nodes={num_nodes}" if num_nodes is not None else "at least one node"
    raise ValueError(
        f'hosts="ray": {asked} with {per_node} {unit}(s) each (num_processes={per_node}) was '
        f"asked, but the Ray cluster at {address} has {len(fits)} such node(s) among its "
        f"{len(alive)} alive: {have or 'none'}. Ask for fewer nodes or processes, add nodes "
        f"to the cluster{', or pass cpu=True to run on the CPUs' if gpus else ''}."
    )
