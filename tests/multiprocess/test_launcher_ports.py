"""Ports: a taken port is a clear error, everything listens on loopback, launches repeat."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import launcher_helpers as h
import psutil
import pytest

from nbaccel import notebook_launcher

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]


@pytest.fixture(params=["127.0.0.1", "0.0.0.0"])
def taken_port(request: pytest.FixtureRequest) -> Iterator[int]:
    """A port that a socket of this process is bound to and listening on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((request.param, 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def _listening_ports() -> set[int]:
    return {
        c.laddr.port
        for c in psutil.Process().net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }


def test_launcher_use_port_already_taken_is_a_clear_error(taken_port: int, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    before = h.child_pids()
    with pytest.raises(OSError) as info:
        notebook_launcher(lambda: h.touch(marker), num_processes=2, use_port=taken_port)
    message = str(info.value)
    assert str(taken_port) in message
    assert "in use" in message
    assert "use_port" in message  # says what to change
    assert h.child_pids() == before
    assert not marker.exists()
    assert h.launch(h.local_rank_env) == [0, 1]


def test_launcher_use_port_given_and_free_is_used(free_port: object) -> None:
    port = free_port()  # type: ignore[operator]
    results = h.launch(h.rank_info, use_port=port)
    assert [r["port"] for r in results] == [str(port)] * 2
    assert port not in _listening_ports(), "the port is still held after the launch"


def test_launcher_listens_on_loopback_only() -> None:
    before = _listening_ports()
    results = h.launch(h.listening_sockets)
    for result in results:
        assert result["ppid"] == os.getpid()
        launcher = result["launcher"]
        # the store the launcher hosts for the workers is among its listening sockets
        assert result["master_port"] in {port for _, port in launcher}, launcher
        assert all(ip == "127.0.0.1" for ip, _ in launcher), launcher
        worker = result["worker"]
        assert worker, "a gloo worker listens on at least one socket"
        assert all(ip == "127.0.0.1" for ip, _ in worker), worker
    store_port = results[0]["master_port"]
    assert store_port not in _listening_ports() - before, "the store port outlived the launch"


def test_launcher_twenty_launches_in_a_row_each_find_a_free_port() -> None:
    before_ports = _listening_ports()
    before = h.child_pids()
    ports = []
    for attempt in range(20):
        results = h.launch(h.quick_info)
        assert [(rank, total) for rank, total, _ in results] == [(0, 1.0), (1, 1.0)], attempt
        assert results[0][2] == results[1][2]
        ports.append(results[0][2])
    assert all(port and int(port) > 0 for port in ports)
    assert not h.wait_no_children(before)
    assert _listening_ports() <= before_ports, "ports are still held after twenty launches"
