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

__all__ = ["C10dRendezvous", "PortInUseError", "StoreHost", "free_port", "join_nodes"]

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
    """

    def __init__(self, bind_host: str, port: int, world_size: int, timeout: timedelta) -> None:
        sock = _listening_socket(bind_host, port)
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
) -> None:
    """Check this node in with the store on node 0 and wait until every node has.

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


class C10dRendezvous:
    """torch's own dynamic rendezvous (``rdzv_backend="c10d"``): machines meet at
    ``endpoint``, and each is given its node rank in order of arrival.

    Args:
        endpoint: ``(host, port)`` where the rendezvous store is (or will be) hosted.
        run_id: the same string on every machine of one job.
        num_nodes: machines that must arrive.
        conf: extra rendezvous settings (e.g. ``join_timeout``, ``last_call_timeout``).
        timeout: seconds to wait for every machine.
    """

    def __init__(
        self,
        endpoint: tuple[str, int],
        run_id: str,
        num_nodes: int,
        conf: dict[str, object],
        timeout: timedelta,
    ) -> None:
        from torch.distributed.elastic.rendezvous import RendezvousParameters
        from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

        settings: dict[str, Any] = {"join_timeout": int(timeout.total_seconds()), **conf}
        params = RendezvousParameters(
            backend="c10d",
            endpoint=f"{endpoint[0]}:{endpoint[1]}",
            run_id=run_id,
            min_nodes=num_nodes,
            max_nodes=num_nodes,
            **settings,
        )
        self._handler = get_rendezvous_handler(params)
        try:
            info = self._handler.next_rendezvous()
        except Exception as exc:
            self.close()
            raise TimeoutError(
                f"the c10d rendezvous at {endpoint[0]}:{endpoint[1]} (run id {run_id!r}) did not "
                f"gather {num_nodes} machines within {timeout.total_seconds():.0f}s: {exc}. Run "
                "the same cell on every machine, or raise rendezvous_timeout."
            ) from None
        self.node_rank = int(info.rank)
        self.num_nodes = num_nodes
        self._store = info.store
        bootstrap = info.bootstrap_store_info
        self.master_addr = str(bootstrap.master_addr) if bootstrap else endpoint[0]
        self.master_port = int(bootstrap.master_port) if bootstrap else endpoint[1]

    def close(self, linger: float = 15.0) -> None:
        """Leave the rendezvous, keeping its store up until every machine has left."""
        with contextlib.suppress(Exception):
            self._handler.shutdown()
        with contextlib.suppress(Exception):
            self._store.set(f"nbaccel/left/{self.node_rank}", "1")
            keys = [f"nbaccel/left/{i}" for i in range(self.num_nodes)]
            self._store.wait(keys, timedelta(seconds=linger))
