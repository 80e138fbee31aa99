"""Route and interface choice for multi-node launches, and the multi-node default port."""

from __future__ import annotations

import pytest

from nbaccel.launch.config import DEFAULT_MULTI_NODE_PORT, LaunchConfig
from nbaccel.launch.nodes.netif import interface_of, resolve, route_to


def test_route_to_loopback_names_lo() -> None:
    route = route_to("localhost")
    assert route.peer == "127.0.0.1" and route.address == "127.0.0.1"
    assert route.interface == "lo" and route.is_local
    assert "is reached from local address 127.0.0.1 on lo" in route.describe()


def test_unknown_host_name_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"does not resolve on this machine.*/etc/hosts"):
        resolve("no-such-machine.invalid")


def test_address_of_no_interface() -> None:
    assert interface_of("192.0.2.77") is None  # a documentation address held by nothing


def test_multi_node_port_defaults_to_29500_single_machine_to_a_free_one() -> None:
    multi = LaunchConfig.build(num_processes=1, num_nodes=2, master_addr="10.0.0.1", cpu=True)
    assert multi.use_port == DEFAULT_MULTI_NODE_PORT == 29500
    single = LaunchConfig.build(num_processes=1, cpu=True)
    assert single.use_port is None  # chosen free at launch time
    assert (
        LaunchConfig.build(num_processes=1, num_nodes=2, use_port=29600, cpu=True).use_port == 29600
    )
