"""How the machines of a multi-node launch meet for one attempt.

Every store nbaccel serves listens on one address only: the local address that routes to the
master (see :mod:`.netif`). With ``rdzv_backend="static"`` machine 0 serves the launch's store
on ``master_addr:use_port`` and every machine checks in; with ``"c10d"`` torch's dynamic
rendezvous hands out node ranks and the machine given rank 0 serves the workers' store.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from ...environment import gloo_socket_interface
from ..config import DEFAULT_MULTI_NODE_PORT, LaunchConfig
from .netif import Route, route_to
from .peers import watch_timeout
from .rendezvous import C10dRendezvous, PortInUseError, StoreHost, join_nodes

__all__ = ["Meeting", "gloo_interface", "host_master_store", "meet_machines"]


@dataclasses.dataclass
class Meeting:
    """What the machines agreed on for one attempt.

    Attributes:
        config: the launch settings with this machine's node rank and the master's address.
        port: the port of the workers' store on the master.
        store: a store every machine reaches, with a short timeout (the machines watch each
            other through it).
        store_node: the machine that hosts ``store`` (None where it is not known).
        route: how this machine reaches the master.
    """

    config: LaunchConfig
    port: int
    store: Any
    store_node: int | None
    route: Route


def gloo_interface(route: Route) -> str:
    """The interface gloo must use: the user's ``GLOO_SOCKET_IFNAME``, else the one that
    routes to the master."""
    chosen = gloo_socket_interface() or route.interface
    if chosen is None:
        raise ValueError(
            f"nbaccel could not tell which network interface holds {route.address}, the "
            f"address that reaches master_addr={route.host!r}. Set GLOO_SOCKET_IFNAME to that "
            "interface (see `ip addr`) before launching."
        )
    return chosen


def _say(config: LaunchConfig, route: Route) -> None:
    if not config.debug:
        return
    user = gloo_socket_interface()
    how = f"GLOO_SOCKET_IFNAME={user} (yours)" if user else f"gloo uses {route.interface}"
    print(
        f"nbaccel: node {config.node_rank}: master_addr {route.describe()}; the stores listen on "
        f"{route.address} only; {how}.",
        file=sys.stderr,
        flush=True,
    )


def host_master_store(
    route: Route, port: int, world_size: int, wait: timedelta, port_option: str = "use_port="
) -> StoreHost:
    """Serve machine 0's store on the master's own address (``route.peer``) only.

    Raises:
        ValueError: ``route`` leads to another machine: this one cannot serve it.
        PortInUseError: the port is taken; the message says how to choose another
            (``port_option``: ``use_port=`` in a notebook, ``--main_process_port`` on the
            command line).
    """
    if not route.is_local:
        raise ValueError(
            f"machine 0 serves the rendezvous on master_addr={route.host!r} ({route.peer}), "
            f"but that is not an address of this machine (it reaches it from {route.address}). "
            "Start node_rank=0 (--machine_rank 0) on the machine that has that address, or give "
            "this machine's own address as the master address on every machine."
        )
    try:
        return StoreHost(route.peer, port, world_size, wait)
    except PortInUseError:
        default = (
            f" ({DEFAULT_MULTI_NODE_PORT} is the default port of multi-node launches)"
            if port == DEFAULT_MULTI_NODE_PORT
            else ""
        )
        raise PortInUseError(
            f"port {port} on {route.peer} (machine 0, master_addr) is already in use{default}. "
            f"Stop what holds it, or pass the same free port as {port_option} on every machine "
            "(it must be open between the machines)."
        ) from None


@contextlib.contextmanager
def meet_machines(config: LaunchConfig, attempt: int) -> Iterator[Meeting]:
    """Meet the other machines for attempt ``attempt``; the stores close on exit."""
    wait = timedelta(seconds=config.rendezvous_timeout)
    if config.rdzv_backend == "c10d":
        endpoint = config.rdzv_endpoint or (config.master_addr, int(config.use_port or 0))
        near = route_to(endpoint[0])
        rdzv = _c10d(config, endpoint, near, wait)
        try:
            joined = dataclasses.replace(
                config, node_rank=rdzv.node_rank, master_addr=rdzv.master_addr
            )
            route = route_to(rdzv.master_addr)
            _say(joined, route)
            store = rdzv.endpoint_store or _client(endpoint[0], endpoint[1], config)
            yield Meeting(joined, rdzv.master_port, store, None, route)
        finally:
            rdzv.close()
        return
    route = route_to(config.master_addr)
    _say(config, route)
    port = int(config.use_port or DEFAULT_MULTI_NODE_PORT)
    host = (
        host_master_store(route, port, config.world_size, wait) if config.node_rank == 0 else None
    )
    try:
        client = join_nodes(route.peer, port, config.node_rank, config.num_nodes, wait, attempt)
        yield Meeting(config, port, client, 0, route)
    finally:
        if host is not None:
            host.close()


def _client(host: str, port: int, config: LaunchConfig) -> Any:
    """A store client for the watch: its operations give up after a short while."""
    return dist.TCPStore(host, port, is_master=False, timeout=watch_timeout(config.node_timeout))


def _c10d(
    config: LaunchConfig, endpoint: tuple[str, int], near: Route, wait: timedelta
) -> C10dRendezvous:
    args = (endpoint, config.rdzv_id, config.num_nodes, config.rdzv_conf, wait, near.address)
    if near.is_local:
        try:
            return C10dRendezvous(*args, hosting=True)
        except PortInUseError:
            pass  # another launcher on this machine serves the endpoint: join it
    return C10dRendezvous(*args, hosting=False)
