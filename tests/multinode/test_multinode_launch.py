"""The quick tour's multi-node cell on two machines, and where the launch listens."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from bed import ADDRESSES, SECOND, Bed, Machine, run_both

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(240)]

TOUR = """
from nbaccel.widgets import launch_dashboard
board = launch_dashboard() if {node} == 0 else None
results = notebook_launcher(
    nf.tour, (2.0,), num_processes=2, num_nodes=2, node_rank={node}{where},
    rendezvous_timeout=60, node_timeout=30, dashboard=board,
)
print("RESULT " + json.dumps(results))
if board is not None:
    print("BOARD " + type(board).__name__ + " " + board.state.headline())
    print("ROWS " + json.dumps(sorted(board.state.ranks)))
"""

FORMS = {
    "default port": ", master_addr='192.0.2.1'",
    "host name and use_port": ", master_addr='main-machine', use_port=29511",
    "c10d": ", master_addr='main-machine', rdzv_backend='c10d', rdzv_id='tour'",
}


def _results(answer: dict[str, Any]) -> list[dict[str, Any]]:
    assert answer["status"] == "ok" and answer["error"] is None, answer
    (line,) = [x for x in answer["stdout"].splitlines() if x.startswith("RESULT ")]
    return list(json.loads(line[len("RESULT ") :]))


@pytest.mark.parametrize("form", list(FORMS))
def test_quick_tour_cell_runs_on_two_machines(form: str, machines: list[Machine]) -> None:
    """Promise: the same cell on each machine (its own node_rank, master_addr as an address
    or a host name, with or without a port, static or c10d) makes one world of 4 ranks whose
    all-reduce crosses the link; each machine's cell gets its own ranks' results and output.
    Machine 0's dashboard shows its own ranks and says where machine 1's ranks report."""
    answers = run_both(machines, [TOUR.format(node=n, where=FORMS[form]) for n in (0, 1)])
    firsts = []
    for answer in answers:
        results = _results(answer)
        first = results[0]["rank"]
        firsts.append(first)
        assert [r["rank"] for r in results] == [first, first + 1]
        assert [r["local_rank"] for r in results] == [0, 1]
        assert all(r["world"] == 4 and r["sum"] == 2.0 * (0 + 1 + 2 + 3) for r in results)
        printed = [x for x in answer["stdout"].splitlines() if "of world 4" in x]
        assert sorted(x.split("rank ")[-1].split()[0] for x in printed if "rank " in x) == [
            str(first),
            str(first + 1),
        ], answer["stdout"]
    assert sorted(firsts) == [0, 2]  # c10d numbers the machines in order of arrival
    (board,) = [x for x in answers[0]["stdout"].splitlines() if x.startswith("BOARD ")]
    assert board.startswith("BOARD LaunchDashboard Finished: 2 ranks"), board
    if form != "c10d":
        assert firsts == [0, 2]
        assert "machine 0 of 2; machine 1's ranks 2-3 report in their own cell" in board
        assert "ROWS [0, 1]" in answers[0]["stdout"]  # the dashboard shows machine 0's ranks
    else:
        assert "other 1 machine(s) report in their own cells" in board


HOLD = """
results = notebook_launcher(
    nf.hold, ({flags!r},), num_processes=2, num_nodes={nodes}, node_rank={node}{where},
    rendezvous_timeout=60, node_timeout=30, debug=True,
)
print("RESULT " + json.dumps(results))
"""


def _while_holding(
    bed: Bed, machines: list[Machine], flags: Path, codes: list[str], ranks: int
) -> tuple[list[list[tuple[str, int]]], list[dict[str, Any]]]:
    """Run the cells, list every namespace's listening sockets while the ranks hold."""
    for machine, code in zip(machines, codes, strict=False):
        machine.submit(code, 120)
    deadline = time.monotonic() + 90
    while len(list(flags.glob("holding*"))) < ranks and time.monotonic() < deadline:
        time.sleep(0.2)
    listening = [bed.listening(0), bed.listening(1)]
    (flags / "release").touch()
    answers = [machine.result(150) for machine in machines[: len(codes)]]
    assert len(list(flags.glob("holding*"))) == ranks, answers
    return listening, answers


def _multi_node_cells(flags: Path, port: int) -> list[str]:
    where = f", master_addr='192.0.2.1', use_port={port}"
    return [HOLD.format(flags=str(flags), nodes=2, node=n, where=where) for n in (0, 1)]


def test_multi_node_listens_on_the_address_that_reaches_the_master(
    bed: Bed, machines: list[Machine], flags: Path
) -> None:
    """Promise: without GLOO_SOCKET_IFNAME, the store and gloo listen only on the address that
    routes to master_addr (not on every interface, not on the second link), and debug mode
    says which interface was chosen."""
    listening, answers = _while_holding(bed, machines, flags, _multi_node_cells(flags, 29512), 4)
    for index, answer in enumerate(answers):
        assert sorted(_results(answer)) == [2 * index, 2 * index + 1]
        here = ADDRESSES[index]
        addresses = {address for address, _ in listening[index]}
        assert addresses <= {"127.0.0.1", here}, listening[index]  # 127.0.0.1: the kernel
        assert len([a for a, _ in listening[index] if a == here]) >= 2, listening[index]
        said = answer["stderr"]
        assert f"is reached from local address {here} on {bed.links[0][index]}" in said, said
        assert f"the stores listen on {here} only; gloo uses {bed.links[0][index]}" in said
    assert ("192.0.2.1", 29512) in listening[0]


def test_the_users_gloo_socket_ifname_wins(bed: Bed, machines: list[Machine], flags: Path) -> None:
    """Promise: a GLOO_SOCKET_IFNAME set by the user is kept: gloo then listens on the
    second link while the store stays on the address that reaches master_addr."""
    pins = [f"os.environ['GLOO_SOCKET_IFNAME'] = {bed.links[1][n]!r}\n" for n in (0, 1)]
    cells = [pin + cell for pin, cell in zip(pins, _multi_node_cells(flags, 29513), strict=True)]
    try:
        listening, answers = _while_holding(bed, machines, flags, cells, 4)
    finally:
        for machine in machines:
            machine.run("os.environ.pop('GLOO_SOCKET_IFNAME', None)", timeout=30)
    for index, answer in enumerate(answers):
        assert sorted(_results(answer)) == [2 * index, 2 * index + 1]
        assert f"GLOO_SOCKET_IFNAME={bed.links[1][index]} (yours)" in answer["stderr"]
        addresses = [address for address, _ in listening[index]]
        assert SECOND[index] in addresses, listening[index]  # gloo, on the user's interface
        assert set(addresses) <= {"127.0.0.1", ADDRESSES[index], SECOND[index]}
    assert ("192.0.2.1", 29513) in listening[0]


def test_single_machine_listens_on_loopback_only(
    bed: Bed, machines: list[Machine], flags: Path
) -> None:
    """Promise: a launch on one machine listens on 127.0.0.1 only, even on a machine with
    other interfaces."""
    cell = HOLD.format(flags=str(flags), nodes=1, node=0, where="")
    listening, answers = _while_holding(bed, machines[:1], flags, [cell], 2)
    assert sorted(_results(answers[0])) == [0, 1]
    assert listening[0] and {a for a, _ in listening[0]} == {"127.0.0.1"}, listening[0]


DEEPSPEED = """
results = notebook_launcher(
    nf.deepspeed_zero3, num_processes=2, num_nodes=2, node_rank={node},
    master_addr='192.0.2.1', rendezvous_timeout=60, node_timeout=60,
)
print("RESULT " + json.dumps(results))
"""


def test_deepspeed_zero3_trains_over_two_machines_like_one_process(
    machines: list[Machine],
) -> None:
    """Promise: DeepSpeed runs across machines as on one: 4 ranks, one ZeRO-3 engine whose
    gathered weights equal one process training on the global batches of 16."""
    import node_functions as nf
    import torch

    answers = run_both(machines, [DEEPSPEED.format(node=n) for n in (0, 1)], timeout=180)
    results = [r for answer in answers for r in _results(answer)]
    assert sorted(r["rank"] for r in results) == [0, 1, 2, 3]
    assert all(r["world"] == 4 and r["stage"] == 3 for r in results)
    assert all(r["weights"] == {} for r in results if r["rank"] != 0)
    (gathered,) = [r["weights"] for r in results if r["rank"] == 0]
    data, model = nf.deepspeed_problem()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for x, y in torch.utils.data.DataLoader(data, batch_size=16):
        torch.nn.functional.mse_loss(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
    for key, value in model.state_dict().items():
        worst = (torch.tensor(gathered[key]) - value).abs().max().item()
        assert worst < 1e-6, (key, worst)
