"""The agents of one attempt or pool generation on a Ray cluster (``hosts="ray"``).

1. The nodes are chosen again from the cluster as it is now (``rayhosts.choose_nodes``: a pool
   restarted after a node was lost takes the nodes alive then), and reserved with a placement
   group: one bundle per node, ``STRICT_SPREAD``, each pinned to its node. A group that cannot
   be placed within ``connect_timeout`` (the CPUs or GPUs are held by other work) is removed
   and refused with what the cluster has.
2. One ``agent.rayhost.AgentHost`` actor per bundle, holding the bundle's CPUs or GPUs (Ray
   then gives the agent and its ranks exactly those GPUs); each binds a socket on its node.
3. The notebook connects to each and both ends prove they hold this attempt's key; the agent
   then speaks the frames it speaks over ssh (``channels.SocketChannel``).

:meth:`RayAgents.release` kills the actors and removes the placement group; the actors are
also the driver's, so Ray ends them when the kernel dies.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import socket
from typing import Any

from ..agent import rayhost
from ..agent.rayhost import AgentHost, handshake
from ..config import LaunchConfig
from ..rayhosts import RayNodes, choose_nodes, import_ray
from .channels import SocketChannel
from .errors import HostError
from .hostlinks import AgentLink

__all__ = ["RayAgents"]

_ACTOR_START_S = 60.0  # a new Ray worker process on a busy node


@dataclasses.dataclass
class RayAgents:
    """The placement group and the actors of one attempt or generation."""

    config: LaunchConfig
    nodes: RayNodes
    group: Any = None
    actors: list[Any] = dataclasses.field(default_factory=list)

    @classmethod
    def start(cls, config: LaunchConfig) -> tuple[RayAgents, list[AgentLink]]:
        """Reserve the nodes, start an agent on each and connect to them (see the module
        docstring); on any failure what was made is released before the error."""
        hosts = config.hosts
        assert hosts is not None and hosts.ray is not None
        asked = hosts.ray
        fresh = choose_nodes(asked.address, len(asked.nodes), asked.per_node, not asked.gpus)
        config = dataclasses.replace(
            config, hosts=dataclasses.replace(hosts, targets=fresh.targets, ray=fresh)
        )
        up = cls(config, fresh)
        try:
            return up, up._connect(hosts.connect_timeout, hosts.python)
        except BaseException:
            up.release()
            raise

    def _connect(self, timeout: float, python: str | None) -> list[AgentLink]:
        ray = import_ray()
        from ray.util.placement_group import placement_group  # Ray is optional (the ray extra)
        from ray.util.scheduling_strategies import (  # Ray is optional (the ray extra)
            PlacementGroupSchedulingStrategy,
        )

        nodes = self.nodes
        self.group = placement_group([nodes.bundle(n) for n in nodes.nodes], "STRICT_SPREAD")
        if not self.group.wait(timeout_seconds=timeout):
            unit = "GPU" if nodes.gpus else "CPU"
            raise HostError(
                nodes.nodes[0].address,
                f"the Ray cluster at {nodes.address} could not reserve {nodes.per_node} "
                f"{unit}(s) on each of {', '.join(n.address for n in nodes.nodes)} within "
                f"{timeout:g}s (connect_timeout): other Ray work holds them. Free them (`ray "
                "status` lists what is in use), or ask for fewer nodes or processes.",
            )
        key = secrets.token_bytes(32)
        # what the actor holds is its bundle; an actor asks 1 CPU by default, which a bundle of
        # GPUs alone would not hold
        share = (
            {"num_gpus": nodes.per_node, "num_cpus": 0}
            if nodes.gpus
            else {"num_cpus": nodes.per_node}
        )
        # the actor's class travels by value: a node's new worker process then imports only
        # the standard library for it, not nbaccel and torch (its agent imports those)
        ray.cloudpickle.register_pickle_by_value(rayhost)
        remote = ray.remote(AgentHost)
        for index in range(len(nodes.nodes)):
            strategy = PlacementGroupSchedulingStrategy(self.group, index)
            options = {**share, "scheduling_strategy": strategy, "max_restarts": 0}
            self.actors.append(remote.options(**options).remote(key, python, timeout))
        wait_s = timeout + _ACTOR_START_S
        calls = [actor.listen.remote() for actor in self.actors]
        try:
            places = ray.get(calls, timeout=wait_s)
        except Exception as exc:  # GetTimeoutError, an actor that died starting
            raise HostError(
                nodes.address,
                f"the agents' Ray actors did not start on {len(nodes.nodes)} node(s) within "
                f"{wait_s:g}s: {type(exc).__name__}: {str(exc).strip()[:1500]}. Check `ray "
                "status` and that nbaccel is installed in the nodes' Python environment.",
            ) from None
        agents = []
        for index, (target, actor, (address, port, _)) in enumerate(
            zip(nodes.targets, self.actors, places, strict=True)
        ):
            sock = _connect(target.entry, address, port, key, timeout)
            channel = SocketChannel(sock, actor, python or "the node's Python")
            agents.append(AgentLink(index, target, channel, timeout))
        return agents

    def describe(self) -> str:
        """``"on the Ray cluster at 10.0.0.1:6379"``."""
        return f"on the Ray cluster at {self.nodes.address}"

    def release(self) -> None:
        """Kill the actors (each agent, and its ranks, die with its actor) and remove the
        placement group; quiet where the cluster is gone already."""
        if not self.actors and self.group is None:
            return
        ray = import_ray()
        for actor in self.actors:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        self.actors.clear()
        if self.group is not None:
            from ray.util.placement_group import (
                remove_placement_group,  # Ray is optional (the ray extra)
            )

            with contextlib.suppress(Exception):
                remove_placement_group(self.group)
            self.group = None


def _connect(entry: str, address: str, port: int, key: bytes, timeout: float) -> socket.socket:
    """The notebook's end of one agent's connection, authenticated both ways (the handshake
    has its own few seconds' bound on each read)."""
    try:
        sock = socket.create_connection((address, port), timeout=timeout)
    except OSError as exc:
        raise HostError(
            entry,
            f"could not connect to the agent on the Ray node {entry} at {address}:{port} "
            f"within {timeout:g}s (connect_timeout): {exc}. The notebook must reach the "
            "nodes' addresses (as a Ray driver on the cluster's network does).",
        ) from None
    sock.settimeout(None)
    if not handshake(sock, key, server=False):
        sock.close()
        raise HostError(
            entry,
            f"the agent on the Ray node {entry} at {address}:{port} did not prove it holds "
            "this launch's key: something else answers at that address.",
        )
    return sock
