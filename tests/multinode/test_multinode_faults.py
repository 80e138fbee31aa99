"""Faults across machines: a pulled cable, a machine that never comes, a rank that raises on
the other machine, and a restart once the cable is back."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from bed import Bed, Machine, run_both

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(240)]

CUT = """
results = notebook_launcher(
    nf.until_cut, ({flags!r},), num_processes=2, num_nodes=2, node_rank={node},
    master_addr='192.0.2.1', use_port={port}, rendezvous_timeout=60, node_timeout=4,
    max_restarts={restarts},
)
print("RESULT " + json.dumps(results))
"""


def _pull_cable_while_running(
    bed: Bed, machines: list[Machine], flags: Path, port: int, restarts: int
) -> list[dict]:
    for node, machine in enumerate(machines):
        machine.submit(CUT.format(flags=str(flags), node=node, port=port, restarts=restarts))
    deadline = time.monotonic() + 90
    while len(list(flags.glob("running*"))) < 4 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(list(flags.glob("running*"))) == 4, "the ranks never got going"
    bed.link(up=False)
    try:
        if restarts:  # both machines give up on attempt 0 (node_timeout=4), then wait
            time.sleep(8)
            bed.link(up=True)
        return [machine.result(120) for machine in machines]
    finally:
        bed.link(up=True)


def test_pulled_cable_ends_both_cells_naming_the_other_machine(
    bed: Bed, machines: list[Machine], flags: Path
) -> None:
    """Promise: when the link goes down mid-run (no process dies), each machine's cell ends
    within node_timeout with an error naming the machine it lost, instead of hanging."""
    answers = _pull_cable_while_running(bed, machines, flags, 29520, restarts=0)
    for node, answer in enumerate(answers):
        other = 1 - node
        error = answer["error"]
        assert error is not None and error["ename"] == "MachineLostError", answer
        assert f"machine {other} (192.0.2.{other + 1}) has not been heard from" in error["evalue"]
        assert "node_timeout" in error["evalue"]


def test_max_restarts_recovers_when_the_cable_is_back(
    bed: Bed, machines: list[Machine], flags: Path
) -> None:
    """Promise: with max_restarts=1 both machines give up on the attempt whose link went
    down, meet again once it is back, and the second attempt finishes on all four ranks."""
    answers = _pull_cable_while_running(bed, machines, flags, 29521, restarts=1)
    for node, answer in enumerate(answers):
        assert answer["error"] is None, answer
        (line,) = [x for x in answer["stdout"].splitlines() if x.startswith("RESULT ")]
        results = json.loads(line[len("RESULT ") :])
        assert [r["rank"] for r in results] == [2 * node, 2 * node + 1]
        assert all(r["attempt"] == 1 and r["sum"] == 4 for r in results), results
        assert "MachineLostError" in answer["stderr"] and "restarting" in answer["stderr"]


def test_machine_that_never_arrives(machines: list[Machine]) -> None:
    """Promise: machine 0 alone reports the missing machine after rendezvous_timeout."""
    answer = machines[0].run(
        "notebook_launcher(nf.tour, (1.0,), num_processes=2, num_nodes=2, node_rank=0, "
        "master_addr='192.0.2.1', use_port=29522, rendezvous_timeout=3)",
        timeout=60,
    )
    error = answer["error"]
    assert error is not None and error["ename"] == "TimeoutError", answer
    assert "node(s) [1] of 2 never arrived at 192.0.2.1:29522 within 3s" in error["evalue"]
    assert "rendezvous_timeout" in error["evalue"]


def test_rank_raising_on_machine_1_is_named_on_machine_0(machines: list[Machine]) -> None:
    """Promise: machine 1's cell raises its rank's own error; machine 0's cell says which
    machine and rank failed (not its own ranks' "connection closed" symptoms)."""
    cell = (
        "notebook_launcher(nf.raise_on, (3,), num_processes=2, num_nodes=2, node_rank={node}, "
        "master_addr='main-machine', use_port=29523, rendezvous_timeout=60, node_timeout=30)"
    )
    answers = run_both(machines, [cell.format(node=n) for n in (0, 1)])
    remote, local = answers[0]["error"], answers[1]["error"]
    assert local is not None and local["ename"] == "ValueError", answers[1]
    assert "bad batch on rank 3" in local["evalue"]
    assert remote is not None and remote["ename"] == "RemoteRankError", answers[0]
    assert "rank 3 on machine 1" in remote["evalue"], remote
    assert "ValueError: bad batch on rank 3" in remote["evalue"]


def test_default_port_taken_is_named(machines: list[Machine]) -> None:
    """Promise: when the default port 29500 is taken on the main machine, the error names it
    and says how to pick another.

    Earlier launches on 29500 can leave connections in TIME_WAIT on that address (the cell
    makes one, as a server that hangs up first does); the blocker sets SO_REUSEADDR as servers
    do, since a plain bind() would then fail in the cell itself. Listening, it still keeps
    every other socket off the port."""
    answer = machines[0].run(
        "import socket\n"
        "server = socket.create_server(('192.0.2.1', 29500))\n"
        "peer = socket.create_connection(('192.0.2.1', 29500)); accepted, _ = server.accept()\n"
        "accepted.close(); peer.close(); server.close()  # TIME_WAIT on 192.0.2.1:29500\n"
        "blocker = socket.socket()\n"
        "blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "blocker.bind(('192.0.2.1', 29500)); blocker.listen()\n"
        "try:\n"
        "    notebook_launcher(nf.tour, (1.0,), num_processes=2, num_nodes=2, node_rank=0,\n"
        "                      master_addr='192.0.2.1', rendezvous_timeout=3)\n"
        "finally:\n"
        "    blocker.close()\n",
        timeout=60,
    )
    error = answer["error"]
    assert error is not None and error["ename"] == "PortInUseError", answer
    assert "port 29500 on 192.0.2.1" in error["evalue"] and "default" in error["evalue"]
    assert "use_port=" in error["evalue"]


def test_a_rank_stalled_on_machine_1_is_named_with_its_machine_and_line(
    machines: list[Machine],
) -> None:
    """Promise (never a silent hang): rank 3 on machine 1 sleeps where the others all_reduce.
    Machine 1's cell names it with its host and line (its launcher asks its own ranks); machine
    0's cell says its ranks wait in that all_reduce and names machine 1's ranks as not seen.

    Machine 0 warns after 2 s and goes on; machine 1 raises after 8 s. Were both to raise at
    once, whichever machine stopped its ranks first would pull its peers out of the
    all_reduce before the other machine's launcher had looked."""
    cell = (
        "notebook_launcher(nf.stall_on, (3,), num_processes=2, num_nodes=2, node_rank={node}, "
        "master_addr='main-machine', use_port=29524, rendezvous_timeout=60, node_timeout=30, "
        "stall_timeout={stall}, on_stall='{then}')"
    )
    answers = run_both(
        machines,
        [cell.format(node=0, stall=2, then="warn"), cell.format(node=1, stall=8, then="raise")],
    )
    there = answers[1]["error"]
    assert there is not None and there["ename"] == "StallError", answers[1]
    assert "rank 3 never joined it: rank 3 is at node_functions.py:" in there["evalue"], there
    assert "time.sleep(60)  # <- stalls" in there["evalue"], there
    assert "ranks 0, 1 run on other machines" in there["evalue"], there
    rows = [line.split() for line in there["evalue"].splitlines() if line.startswith("  3 ")]
    # the host column: the bed's machines keep this host's name (no UTS namespace of their own)
    assert rows and rows[0][1] == socket.gethostname(), there["evalue"]
    # machine 0 warned and went on, until machine 1 stopped its ranks
    assert answers[0]["error"] is not None, answers[0]
    here = answers[0]["stderr"]
    assert here.count("a collective stalled") == 1, here
    assert "ranks 0, 1 have waited" in here and "in all_reduce (#2" in here, here
    assert "every rank of this machine is in it" in here, here
    assert "ranks 2, 3 run on other machines: the cell that launched them" in here, here
