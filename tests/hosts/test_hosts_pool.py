"""WorkerPool(hosts=[...]) and ``%nbaccel start --hosts`` from a real Jupyter kernel on the bed's
login machine: warm ranks on node1 and node2 (one agent per host over ssh), every call on every
rank of every host, errors, interrupts, a lost machine and restarts as on one machine, and
nothing left behind on any host once the pool ends."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.hosts.bed import HostBed
from tests.hosts.launches import closure, module_kernel, node2_cut_during
from tests.hosts.login_kernel import AGENT, LoginKernel
from tests.hosts.shown_memory import SHOWN_MEMORY

SETUP = "from nbaccel import WorkerPool\n"


@pytest.fixture(scope="module")
def kernel(host_bed: HostBed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoginKernel]:
    with module_kernel(host_bed, tmp_path_factory.mktemp("hosts-pool-kernel"), SETUP) as kernel:
        yield kernel


@pytest.fixture(scope="module")
def pool(kernel: LoginKernel, host_bed: HostBed) -> Iterator[str]:
    """A pool of 2 ranks on each of node1 and node2, named ``pool`` in the kernel; once it is
    shut down, none of its processes is left (the kernel's fixture checks the listeners)."""
    out = kernel.ok('pool = WorkerPool(num_processes=2, hosts=["node1", "node2"], node_timeout=10)')
    assert "Starting a pool of 4 processes on 2 machines (node1, node2; 2 each) over ssh" in out
    yield "pool"
    out = kernel.ok("pool.shutdown(); print('LEFT', gone_after(20))")
    assert "LEFT []" in out, out


def test_calls_reach_every_rank_of_every_host_in_rank_order(kernel: LoginKernel, pool: str) -> None:
    out = kernel.ok(
        closure()
        + """
print("RESULTS", pool.run(make(2.0), 1.5))
print("WORLD", pool.world_size, pool.hosts)
"""
    )
    expected = [("node1", 0, 30.0), ("node1", 1, 30.0), ("node2", 2, 30.0), ("node2", 3, 30.0)]
    assert f"RESULTS {expected}" in out, out
    assert "WORLD 4 ['node1', 'node2']" in out, out
    for rank in range(4):
        node = f"node{1 + rank // 2}"
        assert f"[{node} rank{rank}]: hello from {node} as {rank}\n" in out, out


def test_each_calls_output_reaches_its_own_cell(kernel: LoginKernel, pool: str) -> None:
    """A rank's output comes back before its reply (the agent forwards what a rank wrote
    before the message that follows it): every line is in the cell of the call that printed
    it, never in a later one."""
    for call in range(8):
        out = kernel.ok(f"_ = pool.execute('print(\"call {call} rank\", rank)')")
        for rank in range(4):
            assert f"rank{rank}]: call {call} rank {rank}\n" in out, (call, out)
        assert f"call {call - 1} " not in out, (call, out)


def test_namespaces_stay_warm_with_push_pull_and_cells(kernel: LoginKernel, pool: str) -> None:
    out = kernel.ok(
        """
pool.push({"scale": 7})
pool.execute("import socket\\nseen = (socket.gethostname(), scale)")
print("SEEN", pool.pull("seen"))
print("LAST", pool.execute("len(seen[0]) + scale", ranks=[1, 3]))
"""
    )
    assert "SEEN [('node1', 7), ('node1', 7), ('node2', 7), ('node2', 7)]" in out, out
    assert "LAST [12, 12]" in out, out


def test_status_and_where_name_each_ranks_host(kernel: LoginKernel, pool: str) -> None:
    """Each row names its host; ``rss`` is what the rank's agent measured (every 2 s), within
    a quarter of what the idle rank reads of itself: polled for until it is, for at most five
    of the agents' rounds."""
    out = kernel.ok(
        """
import time
own = pool.run(lambda: __import__("psutil").Process().memory_info().rss)
def agree(rows):
    return [r["rss"] is not None and abs(r["rss"] - o) < o / 4 for r, o in zip(rows, own)]
deadline, rows = time.monotonic() + 10, pool.status()
while not all(agree(rows)) and time.monotonic() < deadline:
    time.sleep(0.2)
    rows = pool.status()
print("STATUS", [(r["rank"], r["host"], r["state"]) for r in rows])
print("RSS", agree(rows), [r["rss"] for r in rows], own)
print("WHERE", [(r["rank"], r["host"], r["state"]) for r in pool.where()])
"""
    )
    status = [(r, f"node{1 + r // 2}", "idle") for r in range(4)]
    assert f"STATUS {status}" in out, out
    assert "RSS [True, True, True, True]" in out, (
        f"the agents' figures did not come within a quarter of the ranks' own RSS in 10 s:\n{out}"
    )
    assert f"WHERE {[(r, f'node{1 + r // 2}', 'idle') for r in range(4)]}" in out, out


def test_a_pools_dashboard_shows_the_memory_of_its_ranks_elsewhere(kernel: LoginKernel) -> None:
    """While a call runs, the dashboard of a pool on a host gets what that host's agent
    measured (a pid of node1 means nothing here); the call stays until the dashboard shows
    a figure near the rank's own (:data:`SHOWN_MEMORY`)."""
    out = kernel.ok(
        SHOWN_MEMORY
        + """
import io, shutil
from nbaccel.widgets import TextDashboard
board, figures = TextDashboard(io.StringIO()), tempfile.mkdtemp()
with WorkerPool(num_processes=1, hosts=["node1"], dashboard=board,
                on_event=when_shown(board, figures, [0])) as single:
    own = single.run(own_rss_once_shown, figures)[0]
    shown = board.ranks[0].rss
shutil.rmtree(figures)
print("SHOWN", near(shown, own), shown, own)
"""
    )
    assert "SHOWN True" in out, out  # what it leaves behind: the module's kernel checks


def test_the_store_listens_on_one_address_and_its_keys_need_the_secret(
    kernel: LoginKernel, pool: str, host_bed: HostBed
) -> None:
    """The first host's agent serves the ranks' store on the address the hosts reach it at
    (not on every interface), and a process on another machine that connects without the
    launch's secret sees none of the ranks' keys."""
    out = kernel.ok(
        """
def probe():
    import os, torch.distributed as dist
    store = dist.distributed_c10d._get_default_store()
    if dist.get_rank() == 0:
        store.set("probe", "seen")
    dist.barrier()
    return (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"],
            os.environ["NBACCEL_STORE_PREFIX"], store.get("probe").decode())
print("PROBE", pool.run(probe)[3])
"""
    )
    found = re.search(r"PROBE \('([\d.]+)', '(\d+)', '([0-9a-f]{32})', 'seen'\)", out)
    assert found, out
    address, port, secret = found[1], int(found[2]), found[3]
    assert (address, port) in host_bed.listening("node1")
    assert ("0.0.0.0", port) not in host_bed.listening("node1")
    assert ("::", port) not in host_bed.listening("node1")
    outsider = (
        "import datetime, torch.distributed as dist\n"
        f"c = dist.TCPStore({address!r}, {port}, is_master=False, "
        "timeout=datetime.timedelta(seconds=10))\n"
        "print('PLAIN', c.check(['probe']), c.check(['default_pg/probe']))\n"
    )
    done = host_bed.run("node2", [sys.executable, "-c", outsider], timeout=60)
    assert "PLAIN False False" in done.stdout, done.stdout + done.stderr
    assert secret not in done.stdout


def test_a_rank_raising_on_node2_names_it_and_the_pool_goes_on(
    kernel: LoginKernel, pool: str
) -> None:
    done = kernel.run(
        """
def boom():
    from nbaccel import PartialState
    if PartialState().process_index == 3:
        raise ValueError("bad value on node2")
    return 1
pool.run(boom)
"""
    )
    error = done["error"]
    assert error is not None and error["ename"] == "ValueError", done
    assert "bad value on node2" in error["traceback"], error
    assert "rank 3 on node2 failed" in error["traceback"], error["traceback"]
    out = kernel.ok("print('AFTER', pool.state, pool.run(lambda: 2))")
    assert "AFTER ready [2, 2, 2, 2]" in out, out


def test_an_interrupt_reaches_every_host_and_keeps_the_namespaces(
    kernel: LoginKernel, pool: str
) -> None:
    kernel.ok('pool.push({"kept": "yes"})')
    done = kernel.run(
        """
caught = None
try:
    pool.run(lambda: time.sleep(600))
except KeyboardInterrupt as exc:
    caught = str(exc)
""",
        timeout=6,  # the driver interrupts the kernel then
    )
    assert done["status"] == "timeout", done
    out = kernel.ok("print('CAUGHT', caught); print('KEPT', pool.pull('kept'), pool.state)")
    assert "was interrupted on every rank; the pool is up and every namespace is kept" in out
    assert "KEPT ['yes', 'yes', 'yes', 'yes'] ready" in out, out


def test_the_magics_start_a_pool_on_the_hosts(kernel: LoginKernel) -> None:
    out = kernel.ok("%load_ext nbaccel\n%nbaccel start -n 1 --hosts node1,node2 --cpu")
    assert "nbaccel: a pool of 2 processes on node1, node2 is ready." in out, out
    out = kernel.ok("%%nbaccel\nimport socket\nprint('on', socket.gethostname(), rank)")
    assert "[node1 rank0]: on node1 0\n" in out and "[node2 rank1]: on node2 1\n" in out, out
    out = kernel.ok("%nbaccel status")
    assert re.search(r"\n1 +node2 +\d+ +idle", out), out
    kernel.ok("%nbaccel stop")  # the module's pool runs on: its end counts what is left


def test_nothing_is_left_when_the_kernel_dies(
    host_bed: HostBed, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A kernel shut down with its pool up (no ``shutdown()``): each agent hears its ssh
    channel end and stops its ranks."""
    before = set(_agents())
    other = LoginKernel(host_bed, tmp_path_factory.mktemp("hosts-pool-dying"))
    try:
        other.ok(SETUP + 'p = WorkerPool(num_processes=1, hosts=["node1", "node2"])')
        started = set(_agents()) - before
        assert len(started) >= 4, started  # its two agents and their ranks (and ssh)
    finally:
        other.stop()  # the driver shuts its kernel down at once
    deadline = time.monotonic() + 20
    while set(_agents()) & started and time.monotonic() < deadline:
        time.sleep(0.5)
    assert set(_agents()) & started == set()


def test_a_machine_lost_during_a_call_breaks_the_pool_and_restart_brings_it_back(
    kernel: LoginKernel, host_bed: HostBed
) -> None:
    kernel.ok('lossy = WorkerPool(num_processes=1, hosts=["node1", "node2"], node_timeout=10)')
    code = """
t0 = time.monotonic()
try:
    lossy.run(lambda: time.sleep(600))
except Exception as exc:
    print("RAISED", type(exc).__name__, exc)
    print("\\n".join(exc.__notes__))  # what the traceback shows under the error
print("TOOK", time.monotonic() - t0, "STATE", lossy.state)
"""
    reached = lambda: time.sleep(3)  # noqa: E731 - the call reached both ranks
    with node2_cut_during(kernel, host_bed, code, reached) as (out, ended):
        assert "RAISED MachineLostError machine 1 (node2) was lost" in out, out
        assert "the pool is broken" in out and "STATE broken" in out, out
        assert re.search(r"\n  0 +node1 +running +In \[\d+\], line \d+", out), out
        assert ended < 40, (ended, out)
    out = kernel.ok(
        "lossy.restart(); print('BACK', lossy.run(socket.gethostname)); lossy.shutdown()"
    )
    assert "BACK ['node1', 'node2']" in out, out


def _agents() -> list[str]:
    found = subprocess.run(["pgrep", "-f", AGENT], capture_output=True, text=True)
    return found.stdout.split()
