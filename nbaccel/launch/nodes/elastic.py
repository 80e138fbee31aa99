"""``nbaccel launch``'s rendezvous: torch's elastic agent over stores listening on one address.

torch's own ``static`` and ``c10d`` rendezvous host their stores on every interface. The
handlers here are the same rendezvous over stores nbaccel opens: on one machine the store
listens on 127.0.0.1; on several, machine 0's store listens on the master's address only and
the c10d workers' store on the address that routes to the master (see :mod:`.netif`). Other
backends (etcd, ...) stay torch's own.
"""

from __future__ import annotations

import contextlib
import dataclasses
from datetime import timedelta
from typing import Any

import torch.distributed as dist
from torch.distributed import PrefixStore
from torch.distributed.elastic.rendezvous import (
    RendezvousInfo,
    RendezvousParameters,
    RendezvousStoreInfo,
    rendezvous_handler_registry,
)
from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import StaticTCPRendezvous
from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

from ..config import DEFAULT_MULTI_NODE_PORT
from .meeting import host_master_store
from .netif import route_to
from .rendezvous import LOOPBACK, PortInUseError, StoreHost, bound_handler

__all__ = ["C10D", "STATIC", "ElasticRendezvous", "elastic_rendezvous"]

STATIC = "nbaccel-static"
C10D = "nbaccel-c10d"
_PORT_OPTION = "--main_process_port"


@dataclasses.dataclass
class ElasticRendezvous:
    """What ``torch.distributed.launcher.api.LaunchConfig`` needs, and the stores to close.

    Attributes:
        backend: the registered rendezvous backend name.
        endpoint: ``host:port`` of the rendezvous.
        configs: ``rdzv_configs`` (they carry the store nbaccel hosts to the handler).
        local_addr: this machine's address as the others reach it (None on one machine).
    """

    backend: str
    endpoint: str
    configs: dict[str, Any]
    local_addr: str | None
    _hosts: list[StoreHost] = dataclasses.field(default_factory=list)

    def close(self) -> None:
        """Stop serving every store this machine hosted for the launch."""
        for handler in self.configs.get("nbaccel_handlers", []):
            self._hosts.append(handler.nbaccel_worker_store)
            handler._shared_tcp_store_server = None  # torch's handler would keep the port open
        for host in self._hosts:
            if host is not None:
                host.close()
        self._hosts.clear()


def elastic_rendezvous(
    num_machines: int,
    machine_rank: int,
    main_ip: str | None,
    port: int | None,
    backend: str,
    timeout: timedelta,
) -> ElasticRendezvous:
    """Open this machine's stores (where it hosts one) and name the rendezvous to use.

    Raises:
        PortInUseError: machine 0's port is taken (the message says how to pick another).
        ValueError: machine 0 was given an address that is not its own.
    """
    _register()
    base = {"timeout": int(timeout.total_seconds())}
    if num_machines == 1 and main_ip is None:
        loop = StoreHost(LOOPBACK, port or 0, 1, timeout)
        configs = {**base, "rank": 0, "nbaccel_store": loop}
        return ElasticRendezvous(STATIC, f"{LOOPBACK}:{loop.port}", configs, None, [loop])
    route = route_to(main_ip or LOOPBACK)
    port = port or DEFAULT_MULTI_NODE_PORT
    endpoint = f"{route.peer}:{port}"
    host: StoreHost | None = None
    if backend == "static":
        if machine_rank == 0:
            host = host_master_store(route, port, num_machines, timeout, _PORT_OPTION)
        configs = {**base, "rank": machine_rank, "nbaccel_store": host}
        return ElasticRendezvous(STATIC, endpoint, configs, route.address, [host] if host else [])
    if backend == "c10d":
        if route.is_local:  # the machine that has the endpoint's address serves it
            with contextlib.suppress(PortInUseError):
                host = StoreHost(route.address, port, num_machines, timeout)
        configs = {**base, "nbaccel_store": host, "nbaccel_handlers": []}
        return ElasticRendezvous(C10D, endpoint, configs, route.address, [host] if host else [])
    return ElasticRendezvous(backend, f"{main_ip or LOOPBACK}:{port}", base, route.address)


class _BoundStatic(StaticTCPRendezvous):
    """torch's static rendezvous over the store nbaccel hosts (machine 0) or joins."""

    def __init__(self, params: RendezvousParameters) -> None:
        addr, port = parse_rendezvous_endpoint(params.endpoint, DEFAULT_MULTI_NODE_PORT)
        rank = int(params.config["rank"])
        timeout = int(params.config.get("timeout", 900))
        super().__init__(addr, port, rank, params.max_nodes, params.run_id, timeout)
        self._host: StoreHost | None = params.config.get("nbaccel_store")

    def get_backend(self) -> str:
        return STATIC

    def next_rendezvous(self) -> RendezvousInfo:
        if self._store is None:
            self._store = self._host.store if self._host is not None else None
        if self._store is None:  # the other machines join machine 0's store
            self._store = dist.TCPStore(
                self.master_addr, self.master_port, is_master=False, timeout=self.timeout
            )
        store = PrefixStore(self.run_id, self._store)
        where = RendezvousStoreInfo(self.master_addr, self.master_port)
        return RendezvousInfo(store, self.rank, self.world_size, where)


def _static_handler(params: RendezvousParameters) -> Any:
    return _BoundStatic(params)


def _c10d_handler(params: RendezvousParameters) -> Any:
    addr, port = parse_rendezvous_endpoint(params.endpoint, DEFAULT_MULTI_NODE_PORT)
    timeout = timedelta(seconds=float(params.config.get("timeout", 900)))
    handler = bound_handler(
        (addr, port),
        params.run_id,
        params.max_nodes,
        params.config,
        timeout,
        params.local_addr,
        params.config.get("nbaccel_store"),
        C10D,
    )
    params.config["nbaccel_handlers"].append(handler)
    return handler


def _register() -> None:
    for name, creator in ((STATIC, _static_handler), (C10D, _c10d_handler)):
        with contextlib.suppress(ValueError):  # registered by an earlier launch in this process
            rendezvous_handler_registry.register(name, creator)
