"""Where workers meet: a free port, and the TCPStore that the launcher hosts for them.

On one machine the launcher hosts torch's ``TCPStore`` itself, on a socket bound to
127.0.0.1 that it handed to the store (``master_listen_fd``), so nothing listens on other
interfaces and the port cannot be taken between choosing and binding it. Workers connect as
clients (``TORCHELASTIC_USE_AGENT_STORE``, torch's own switch for an agent-hosted store). On
several machines the launcher of node 0 hosts the store on ``master_addr:port`` and every
node's launcher checks in before starting workers, so a node that never arrives is reported
after ``rendezvous_timeout`` instead of hanging.
"""

from __future__ import annotations

import contextlib
import errno
import socket
from datetime import timedelta
from typing import Any

import torch.distributed as dist

__all__ = [
    "C10dRendezvous",
    "PortInUseError",
    "StoreHost",
    "bound_handler",
    "free_port",
    "join_nodes",
]

LOOPBACK = "127.0.0.1"


class PortInUseError(OSError):
    """The port asked for with ``use_port`` is taken."""


def _listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUseError(
                exc.errno,
                f"port {port} on {host} is already in use. Pass another use_port=, or leave "
                "use_port=None on a single machine and nbaccel picks a free port.",
            ) from None
        raise
    return sock


def free_port(host: str = LOOPBACK) -> int:
    """A port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class StoreHost:
    """The TCPStore server for one attempt of a launch, hosted in the launcher's process.

    Args:
        bind_host: address to listen on (127.0.0.1 on one machine).
        port: port to listen on; 0 picks a free one.
        world_size: number of worker processes in the job.
        timeout: how long store operations wait.
        listener: a socket already bound to ``bind_host:port`` and listening, to serve on
            (a host's agent binds it before it tells the notebook the port).
    """

    def __init__(
        self,
        bind_host: str,
        port: int,
        world_size: int,
        timeout: timedelta,
        listener: socket.socket | None = None,
    ) -> None:
        sock = listener if listener is not None else _listening_socket(bind_host, port)
        self.host = LOOPBACK if bind_host in ("0.0.0.0", "::") else bind_host
        self.port = int(sock.getsockname()[1])
        try:
            self.store: dist.TCPStore | None = dist.TCPStore(
                self.host,
                self.port,
                world_size=world_size,
                is_master=True,
                wait_for_workers=False,
                timeout=timeout,
                master_listen_fd=sock.fileno(),
            )
        except Exception:
            sock.close()
            raise
        sock.detach()  # the store owns the descriptor now and closes it

    def close(self) -> None:
        """Stop serving; the port is released."""
        self.store = None

    def __enter__(self) -> StoreHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def join_nodes(
    master_addr: str,
    port: int,
    node_rank: int,
    num_nodes: int,
    timeout: timedelta,
    attempt: int = 0,
) -> Any:
    """Check this node in with the store on node 0 and wait until every node has; the
    connected store client is returned (the launcher watches the other machines through it).

    Raises:
        TimeoutError: naming the nodes that did not arrive within ``timeout``.
    """
    try:
        client = dist.TCPStore(master_addr, port, is_master=False, timeout=timeout)
    except Exception as exc:
        raise TimeoutError(
            f"node {node_rank} could not reach the main node at {master_addr}:{port} within "
            f"{timeout.total_seconds():.0f}s ({type(exc).__name__}). Start the same cell with "
            "node_rank=0 on the main machine, and check master_addr, use_port and firewalls."
        ) from None
    prefix = f"nbaccel/attempt{attempt}/node"
    client.set(f"{prefix}{node_rank}", "1")
    keys = [f"{prefix}{other}" for other in range(num_nodes)]
    try:
        client.wait(keys, timeout)
    except Exception:
        missing = [other for other, key in enumerate(keys) if not client.check([key])]
        raise TimeoutError(
            f"node(s) {missing} of {num_nodes} never arrived at {master_addr}:{port} within "
            f"{timeout.total_seconds():.0f}s. Run the same cell on every machine with its own "
            "node_rank, or raise rendezvous_timeout."
        ) from None
    return client


class C10dRendezvous:
    """torch's own dynamic rendezvous (``rdzv_backend="c10d"``): machines meet at
    ``endpoint``, and each is given its node rank in order of arrival.

    The machine whose address is ``endpoint``'s host serves the rendezvous store, bound to that
    address only; the machine given node rank 0 serves the workers' store, bound to
    ``local_addr`` (the address that reaches the others), never to every interface.

    Args:
        endpoint: ``(host, port)`` where the rendezvous store is (or will be) hosted.
        run_id: the same string on every machine of one job.
        num_nodes: machines that must arrive.
        conf: extra rendezvous settings (``join_timeout``, ``last_call_timeout``,
            ``close_timeout``, ``keep_alive_interval``, ``keep_alive_max_attempt``).
        timeout: seconds to wait for every machine.
        local_addr: this machine's address as the others reach it.
        hosting: True on the machine that serves ``endpoint``.
    """

    def __init__(
        self,
        endpoint: tuple[str, int],
        run_id: str,
        num_nodes: int,
        conf: dict[str, object],
        timeout: timedelta,
        local_addr: str | None = None,
        hosting: bool = False,
    ) -> None:
        self._endpoint_host: StoreHost | None = None
        if hosting:
            bind = local_addr or endpoint[0]
            self._endpoint_host = StoreHost(bind, endpoint[1], num_nodes, timeout)
        try:
            self._handler = bound_handler(
                endpoint, run_id, num_nodes, conf, timeout, local_addr, self._endpoint_host
            )
            info = self._handler.next_rendezvous()
        except Exception as exc:
            self.close(linger=0)
            raise TimeoutError(
                f"the c10d rendezvous at {endpoint[0]}:{endpoint[1]} (run id {run_id!r}) did not "
                f"gather {num_nodes} machines within {timeout.total_seconds():.0f}s: {exc}. Run "
                "the same cell on every machine, or raise rendezvous_timeout."
            ) from None
        self.node_rank = int(info.rank)
        self.num_nodes = num_nodes
        self.endpoint_store = self._endpoint_host.store if self._endpoint_host else None
        self.store = info.store
        bootstrap = info.bootstrap_store_info
        self.master_addr = str(bootstrap.master_addr) if bootstrap else endpoint[0]
        self.master_port = int(bootstrap.master_port) if bootstrap else endpoint[1]

    def close(self, linger: float = 15.0) -> None:
        """Leave the rendezvous, keeping its stores up until every machine has left."""
        handler = getattr(self, "_handler", None)
        if handler is not None:
            with contextlib.suppress(Exception):
                handler.shutdown()
        store = getattr(self, "store", None)
        if store is not None and linger > 0:
            with contextlib.suppress(Exception):
                store.set(f"nbaccel/left/{self.node_rank}", "1")
                keys = [f"nbaccel/left/{i}" for i in range(self.num_nodes)]
                store.wait(keys, timedelta(seconds=linger))
        for host in (getattr(handler, "nbaccel_worker_store", None), self._endpoint_host):
            if host is not None:
                host.close()
        if handler is not None:  # torch's handler keeps the stores (and so their ports) alive
            handler._shared_tcp_store_server = None
        self._handler = self.store = self.endpoint_store = None


def bound_handler(
    endpoint: tuple[str, int],
    run_id: str,
    num_nodes: int,
    conf: dict[str, object],
    timeout: timedelta,
    local_addr: str | None,
    endpoint_host: StoreHost | None,
    backend_name: str = "c10d",
) -> Any:
    """torch's DynamicRendezvousHandler over a store nbaccel opened (bound to one address);
    ``backend_name`` is the name it registers under (torch's agent checks it)."""
    # torchrun's rendezvous is slow to import and only elastic launches use it
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
        C10dRendezvousBackend,
    )
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
        DynamicRendezvousHandler,
        RendezvousTimeout,
    )

    class BoundHandler(DynamicRendezvousHandler):
        """Serves the workers' store on this machine's own address only."""

        nbaccel_worker_store: StoreHost | None = None

        def get_backend(self) -> str:
            return backend_name

        def _create_tcp_store_server(self, master_addr: str, master_port: int) -> Any:
            self.nbaccel_worker_store = StoreHost(master_addr, master_port, 1, timeout)
            return self.nbaccel_worker_store.store

    if endpoint_host is not None:
        store: Any = endpoint_host.store
    else:
        store = dist.TCPStore(endpoint[0], endpoint[1], is_master=False, timeout=timeout)

    def seconds(key: str, default: float) -> timedelta:
        return timedelta(seconds=float(conf.get(key, default)))  # type: ignore[arg-type]

    limits = RendezvousTimeout(
        join=seconds("join_timeout", timeout.total_seconds()),
        last_call=seconds("last_call_timeout", 1),
        close=seconds("close_timeout", 30),
    )
    return BoundHandler.from_backend(
        run_id,
        store,
        C10dRendezvousBackend(store, run_id),
        num_nodes,
        num_nodes,
        local_addr,
        limits,
        keep_alive_interval=int(conf.get("keep_alive_interval", 5)),  # type: ignore[call-overload]
        keep_alive_max_attempt=int(conf.get("keep_alive_max_attempt", 3)),  # type: ignore[call-overload]
    )
