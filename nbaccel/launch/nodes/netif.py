"""Which local address and network interface reach another machine.

A multi-node launch must listen on, and let gloo use, the interface that routes to
``master_addr``: not loopback (a host name often resolves to 127.0.0.1 or 127.0.1.1) and not
the first interface found. The kernel's routing table answers the question: connecting a UDP
socket sends nothing but makes the kernel choose the source address it would use, and that
address names its interface.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import socket
import struct
from dataclasses import dataclass

__all__ = ["Route", "interface_of", "resolve", "route_to"]

_SIOCGIFADDR = 0x8915  # Linux: the IPv4 address of an interface


@dataclass(frozen=True)
class Route:
    """How this machine reaches ``host``.

    Attributes:
        host: the name or address as given.
        peer: ``host`` resolved to an IP address.
        address: the local address that the routing table uses to reach ``peer``.
        interface: the network interface that holds ``address`` (None where it cannot be told).
    """

    host: str
    peer: str
    address: str
    interface: str | None

    @property
    def is_local(self) -> bool:
        """True when ``host`` is an address of this machine."""
        return self.peer == self.address or ipaddress.ip_address(self.peer).is_loopback

    def describe(self) -> str:
        """One line for debug mode: what reaches the master and through which interface."""
        via = self.interface or "an interface nbaccel could not name"
        name = f"{self.host} ({self.peer})" if self.host != self.peer else self.host
        return f"{name} is reached from local address {self.address} on {via}"


def resolve(host: str) -> str:
    """``host`` (a name or an address) as an IP address; IPv4 preferred.

    Raises:
        ValueError: the name does not resolve on this machine.
    """
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ValueError(
            f"master_addr={host!r} does not resolve on this machine ({exc.strerror}). Use the "
            "main machine's IP address, or add its name to /etc/hosts (or DNS) on every machine."
        ) from None
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return str(infos[0][4][0])


def route_to(host: str) -> Route:
    """The local address and interface that this machine uses to reach ``host``.

    Raises:
        ValueError: ``host`` does not resolve, or no route reaches it.
    """
    peer = resolve(host)
    family = socket.AF_INET6 if ":" in peer else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((peer, 9))  # UDP: chooses a route and source address, sends nothing
        except OSError as exc:
            raise ValueError(
                f"this machine has no route to master_addr={host!r} ({peer}): {exc.strerror}. "
                "Check the address and this machine's network settings."
            ) from None
        address = str(probe.getsockname()[0])
    return Route(host, peer, address, interface_of(address))


def interface_of(address: str) -> str | None:
    """The name of the interface that holds ``address``, or None."""
    if ipaddress.ip_address(address).is_loopback:
        return "lo" if _has_interface("lo") else None
    if ":" in address:
        return _ipv6_interface(address)
    for _, name in socket.if_nameindex():
        if _ipv4_of(name) == address:
            return name
    return None


def _has_interface(name: str) -> bool:
    return any(found == name for _, found in socket.if_nameindex())


def _ipv4_of(name: str) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()))
        except OSError:  # no IPv4 address on this interface
            return None
    return socket.inet_ntoa(packed[20:24])


def _ipv6_interface(address: str) -> str | None:
    wanted = ipaddress.ip_address(address.split("%")[0]).exploded.replace(":", "")
    with contextlib.suppress(OSError), open("/proc/net/if_inet6") as table:
        for line in table:
            fields = line.split()
            if len(fields) >= 6 and fields[0] == wanted:
                return fields[5]
    return None
