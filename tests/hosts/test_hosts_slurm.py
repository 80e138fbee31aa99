"""notebook_launcher(..., hosts="slurm") from a real Jupyter kernel that runs inside a SLURM
allocation of two nodes (``salloc -N2`` on the bed's login machine, as a JupyterHub spawner
does): the agents start as job steps with srun, the ranks run on node1 and node2, and neither
a process nor a job step is left behind, whatever way the launch ends."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from tests.hosts.bed import HostBed
from tests.hosts.launches import check_a_rank_failing_on_node2, check_an_interrupt, closure
from tests.hosts.login_kernel import AGENT, LoginKernel, agents_left_after

SETUP = """
import os, socket, subprocess, time
from nbaccel import notebook_launcher

def left():
    # the agents and their ranks (one process table for every machine of the bed), and the
    # job's steps that still run (the kernel itself runs in salloc's shell, not in a step)
    agents = subprocess.run(["pgrep", "-f", "@AGENT@"], capture_output=True, text=True)
    steps = subprocess.run(
        ["squeue", "-h", "-s", "-j", os.environ["SLURM_JOB_ID"], "-o", "%i %j"],
        capture_output=True, text=True,
    )
    ours = [s for s in steps.stdout.splitlines() if s.split()[-1] not in ("extern", "interactive")]
    return agents.stdout.split(), ours
""".replace("@AGENT@", AGENT)


@pytest.fixture(scope="module")
def kernel(host_bed: HostBed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoginKernel]:
    kernel = LoginKernel(host_bed, tmp_path_factory.mktemp("slurm-kernel"), allocation=2)
    done = kernel.run(SETUP, timeout=120)
    assert done["error"] is None, done
    yield kernel
    kernel.stop()
    assert agents_left_after(15) == []


def test_the_allocations_nodes_run_the_ranks_in_order(kernel: LoginKernel) -> None:
    out = kernel.ok(
        # the two agents' steps, as squeue lists them meanwhile
        closure("(len(left()[1]),)")
        + """
results = notebook_launcher(make(2.0), (1.5,), num_processes=2, hosts="slurm")
print("RESULTS", results)
print("LEFT", left())
""",
    )
    expected = [(f"node{1 + r // 2}", r, 30.0, 2) for r in range(4)]
    assert f"RESULTS {expected}" in out, out
    assert "on 2 machines (node1, node2; 2 each) in SLURM job" in out, out
    for rank in range(4):
        node = f"node{1 + rank // 2}"
        assert f"[{node} rank{rank}]: hello from {node} as {rank}\n" in out, out
    assert "LEFT ([], [])" in out, out


def test_a_rank_raising_on_node2_raises_in_the_cell_and_ends_the_steps(
    kernel: LoginKernel,
) -> None:
    check_a_rank_failing_on_node2(kernel, '"slurm"', "left()", "([], [])")


def test_an_interrupt_stops_every_step(kernel: LoginKernel) -> None:
    check_an_interrupt(kernel, '"slurm"', "left()", "([], [])")


def test_a_pool_on_the_allocation_keeps_its_steps_until_shutdown(kernel: LoginKernel) -> None:
    """``%nbaccel start --hosts slurm``: one step per node for the pool's life, warm
    namespaces on both nodes, and no step once the pool stops."""
    out = kernel.ok(
        """
%load_ext nbaccel
%nbaccel start -n 1 --hosts slurm --cpu
"""
    )
    assert "a pool of 2 processes on node1, node2 is ready" in out, out
    kernel.ok("%%nbaccel\nimport socket\nhere = socket.gethostname()")
    out = kernel.ok("%%nbaccel\nprint('on', here, rank)")
    assert "[node1 rank0]: on node1 0\n" in out and "[node2 rank1]: on node2 1\n" in out, out
    out = kernel.ok("print('STEPS', len(left()[1]))")
    assert "STEPS 2" in out, out  # the pool's agents run as steps of the job between cells
    out = kernel.ok("%nbaccel stop\ntime.sleep(1)\nprint('LEFT', left())")
    assert "LEFT ([], [])" in out, out


def test_outside_an_allocation_the_error_says_how_to_get_one(host_bed: HostBed) -> None:
    code = (
        "from nbaccel import notebook_launcher\n"
        "try:\n"
        "    notebook_launcher(print, num_processes=1, hosts='slurm')\n"
        "except ValueError as exc:\n"
        "    print('REFUSED', exc)\n"
    )
    done = host_bed.run("login", [sys.executable, "-c", code], env=host_bed.env(), timeout=120)
    assert 'REFUSED hosts="slurm" runs the ranks on the nodes of the SLURM allocation' in (
        done.stdout
    ), done.stdout + done.stderr
    assert "salloc -N 2" in done.stdout
