"""``WorkerPool(hosts="ray")`` and ``%nbaccel start --hosts ray`` from a real Jupyter kernel on
the Ray bed's head: warm ranks on node1 and node2, every call on every rank of every node, a
rank's exception, an interrupt that keeps the namespaces, ``where()`` and the status naming
each rank's node, a node lost during a call breaking the pool and ``restart()`` bringing it
back, and nothing left (Ray's state API, the nodes' listeners) when the pool ends and when
the kernel dies with a pool up."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from tests.hosts.login_kernel import LoginKernel
from tests.ray.bed_ray import RayBed
from tests.ray.kernels import LEFT, nbaccel_listeners, ray_kernel

SETUP = "from nbaccel import WorkerPool\n"


@pytest.fixture(scope="module")
def kernel(ray_bed: RayBed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoginKernel]:
    with ray_kernel(ray_bed, tmp_path_factory.mktemp("ray-pool-kernel"), SETUP) as kernel:
        yield kernel


@pytest.fixture(scope="module")
def pool(kernel: LoginKernel, ray_bed: RayBed) -> Iterator[str]:
    """A pool of one rank on each node, named ``pool`` in the kernel; once it is shut down,
    nothing of it is left."""
    out = kernel.ok('pool = WorkerPool(hosts="ray", node_timeout=10)', timeout=240)
    assert "a pool of 2 processes on 2 machines (node1, node2; 1 each) on the Ray cluster" in out
    yield "pool"
    out = kernel.ok("pool.shutdown(); print('LEFT', left_after(20))")
    assert "LEFT []" in out, out
    for node in ("node1", "node2"):
        assert nbaccel_listeners(ray_bed, node) == [], node


def test_calls_reach_every_rank_of_every_node(kernel: LoginKernel, pool: str) -> None:
    out = kernel.ok(
        """
print("RESULTS", pool.run(train, 3.0))
pool.push({"scale": 7})
pool.execute("import socket\\nseen = (socket.gethostname(), scale)")
print("SEEN", pool.pull("seen"))
print("HOSTS", pool.hosts)
"""
    )
    assert "RESULTS [('node1', 0, 9.0), ('node2', 1, 9.0)]" in out, out
    assert "SEEN [('node1', 7), ('node2', 7)]" in out, out
    assert "HOSTS ['node1', 'node2']" in out, out
    assert "[node1 rank0]: same line from every rank\n" in out, out
    assert "[node2 rank1]: same line from every rank\n" in out, out


def test_warm_round_trips_are_quick(kernel: LoginKernel, pool: str) -> None:
    """Forty calls in a row on both nodes all answer (their time is benchmarks/' business;
    here only that they complete within a generous bound on a loaded machine)."""
    out = kernel.ok(
        """
t0 = time.monotonic()
for _ in range(40):
    assert pool.execute("1 + 1") == [2, 2]
print("EACH", (time.monotonic() - t0) / 40)
"""
    )
    assert float(out.split("EACH")[1].split()[0]) < 1.0, out


def test_a_rank_raising_and_an_interrupt_keep_the_pool(kernel: LoginKernel, pool: str) -> None:
    done = kernel.run("pool.execute('x = 1\\nif rank == 1: raise KeyError(\"on node2\")')")
    error = done["error"]
    assert error is not None and error["ename"] == "KeyError", done
    assert "on node2" in error["traceback"], error["traceback"]
    done = kernel.run(
        """
caught = None
try:
    pool.run(lambda: time.sleep(600))
except KeyboardInterrupt as exc:
    caught = str(exc)
""",
        timeout=8,  # the driver interrupts the kernel then
    )
    assert done["status"] == "timeout", done
    out = kernel.ok("print('CAUGHT', caught); print('AFTER', pool.pull('x'), pool.state)")
    assert "was interrupted on every rank; the pool is up and every namespace is kept" in out
    assert "AFTER [1, 1] ready" in out, out


def test_status_and_where_name_each_ranks_node(kernel: LoginKernel, pool: str) -> None:
    """Each row names its node; the memory the node's agent measured arrives within a few
    of its rounds."""
    out = kernel.ok(
        """
deadline, rows = time.monotonic() + 10, pool.status()
while any(r["rss"] is None for r in rows) and time.monotonic() < deadline:
    time.sleep(0.2)
    rows = pool.status()
print("STATUS", [(r["rank"], r["host"], r["state"], r["rss"] is not None) for r in rows])
print("WHERE", [(r["rank"], r["host"], r["state"]) for r in pool.where()])
"""
    )
    assert "STATUS [(0, 'node1', 'idle', True), (1, 'node2', 'idle', True)]" in out, out
    assert "WHERE [(0, 'node1', 'idle'), (1, 'node2', 'idle')]" in out, out


def test_a_launch_while_the_pool_holds_the_cpus_is_refused_in_seconds(
    kernel: LoginKernel, pool: str
) -> None:
    """The pool holds both nodes' CPUs: a launch's placement group cannot be placed, and it
    is removed and refused after connect_timeout, never waited on; the pool is untouched."""
    out = kernel.ok(
        """
from nbaccel import notebook_launcher
t0 = time.monotonic()
try:
    notebook_launcher(print, hosts="ray", connect_timeout=3)
except Exception as exc:
    print("REFUSED", type(exc).__name__, round(time.monotonic() - t0), "|", exc)
kinds = [entry.split()[0] for entry in left()]
print("ACTORS", kinds.count("actor"), "GROUPS", kinds.count("group"))
print("STILL", pool.execute("1 + 1"))
"""
    )
    assert "REFUSED HostError" in out, out
    assert "could not reserve 1 CPU(s) on each of 203.0.113.11, 203.0.113.12 within 3s" in out
    assert int(out.split("REFUSED HostError")[1].split("|")[0]) < 15, out
    assert "ACTORS 2 GROUPS 1" in out, out  # the pool's own, nothing of the refused launch
    assert "STILL [2, 2]" in out, out


def test_the_magics_start_a_pool_on_the_ray_cluster(kernel: LoginKernel, pool: str) -> None:
    kernel.ok("pool.shutdown()")
    out = kernel.ok("%load_ext nbaccel\n%nbaccel start -n 1 --hosts ray --cpu", timeout=240)
    assert "nbaccel: a pool of 2 processes on node1, node2 is ready." in out, out
    out = kernel.ok("%%nbaccel\nimport socket\nprint('on', socket.gethostname(), rank)")
    assert "[node1 rank0]: on node1 0\n" in out and "[node2 rank1]: on node2 1\n" in out, out
    out = kernel.ok("%nbaccel stop\nprint('LEFT', left_after(20))")
    assert "LEFT []" in out, out
    kernel.ok('pool = WorkerPool(hosts="ray", node_timeout=10)', timeout=240)  # for the next


def test_a_node_lost_during_a_call_breaks_the_pool_and_restart_brings_it_back(
    kernel: LoginKernel, ray_bed: RayBed
) -> None:
    kernel.ok("pool.shutdown()")  # its CPUs go to this test's pool (shutdown is idempotent)
    out = kernel.ok('lossy = WorkerPool(hosts="ray", node_timeout=10)', timeout=240)
    answer: dict[str, object] = {}
    code = """
try:
    lossy.execute("import time\\ntime.sleep(300)")
except Exception as exc:
    print("LOST", type(exc).__name__, exc)
"""
    runner = threading.Thread(target=lambda: answer.update(kernel.run(code, timeout=180)))
    runner.start()
    try:
        time.sleep(3)
        ray_bed.kill_node("node2")
        runner.join(150)
        out = str(answer.get("stdout", ""))
        assert "LOST MachineLostError machine 1 (node2) was lost" in out, answer
    finally:
        ray_bed.restart_node("node2")
    out = kernel.ok(
        "lossy.restart(); print('BACK', lossy.run(socket.gethostname)); lossy.shutdown()",
        timeout=240,
    )
    assert "BACK ['node1', 'node2']" in out, out


def test_nothing_is_left_when_the_kernel_dies(
    ray_bed: RayBed, tmp_path_factory: pytest.TempPathFactory, kernel: LoginKernel
) -> None:
    """A kernel shut down with its pool up (no ``shutdown()``): Ray ends the driver's actors,
    each agent dies with its actor and the ranks with their agent."""
    kernel.ok("pool.shutdown()")  # its CPUs go to the other kernel's pool
    before = kernel.ok("print('LEFT', sorted(left()))")
    other = LoginKernel(ray_bed, tmp_path_factory.mktemp("ray-dying"))  # type: ignore[arg-type]
    try:
        other.ok(LEFT + 'from nbaccel import WorkerPool\np = WorkerPool(hosts="ray")', timeout=240)
        assert "[2, 2]" in other.ok("print(p.execute('1 + 1'))")
    finally:
        other.stop()  # the driver shuts its kernel down at once
    deadline = time.monotonic() + 30
    while (now := kernel.ok("print('LEFT', sorted(left()))")) != before:
        assert time.monotonic() < deadline, (before, now)
        time.sleep(1)
