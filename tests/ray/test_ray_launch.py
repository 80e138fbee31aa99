"""``notebook_launcher(hosts="ray")`` from a real Jupyter kernel on the Ray bed's head: the ranks
run on node1 and node2 (one Ray actor's agent on each), and everything the ssh and SLURM hosts
guarantee holds: values by value and in rank order, every rank's output live and prefixed (not
deduplicated), the failing rank's own exception, an interrupt, a node lost mid-run, bad input
refused within seconds, and nothing left behind by Ray's own state API and the nodes'
sockets."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosts.login_kernel import AGENT, LoginKernel
from tests.ray.bed_ray import RayBed
from tests.ray.kernels import nbaccel_listeners, ray_kernel

SETUP = "from nbaccel import notebook_launcher\n"


@pytest.fixture(scope="module")
def kernel(ray_bed: RayBed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoginKernel]:
    with ray_kernel(ray_bed, tmp_path_factory.mktemp("ray-launch-kernel"), SETUP) as kernel:
        yield kernel


def _nothing_left(kernel: LoginKernel, ray_bed: RayBed) -> None:
    out = kernel.ok("print('LEFT', left_after(20))")
    assert "LEFT []" in out, out
    for node in ("node1", "node2"):
        assert nbaccel_listeners(ray_bed, node) == [], node


def test_values_and_output_of_every_rank_of_every_node(
    kernel: LoginKernel, ray_bed: RayBed
) -> None:
    out = kernel.ok(
        """
scale = 2.5  # travels with the closure, by value
print("RESULTS", notebook_launcher(lambda: train(scale), num_processes=1, hosts="ray"))
""",
        timeout=240,
    )
    assert "RESULTS [('node1', 0, 7.5), ('node2', 1, 7.5)]" in out, out
    assert "on 2 machines (node1, node2; 1 each) on the Ray cluster at" in out, out
    # the same line from both ranks: both shown, each with its node and rank
    assert "[node1 rank0]: same line from every rank\n" in out, out
    assert "[node2 rank1]: same line from every rank\n" in out, out
    assert "repeated" not in out, out
    _nothing_left(kernel, ray_bed)


def test_num_nodes_takes_that_many_nodes(kernel: LoginKernel) -> None:
    out = kernel.ok(
        'print("RESULTS", notebook_launcher(socket.gethostname, num_nodes=1, hosts="ray"))',
        timeout=240,
    )
    assert "RESULTS ['node1']" in out, out


def test_a_failing_rank_raises_its_own_exception(kernel: LoginKernel, ray_bed: RayBed) -> None:
    done = kernel.run(
        """
def boom():
    from nbaccel import PartialState
    state = PartialState()
    if state.process_index == 1:
        raise ValueError(f"bad value on {socket.gethostname()}")
    time.sleep(120)  # rank 0 waits: the launcher stops it
t0 = time.monotonic()
notebook_launcher(boom, hosts="ray")
""",
        timeout=240,
    )
    error = done["error"]
    assert error is not None and error["ename"] == "ValueError", done
    assert "bad value on node2" in error["traceback"]
    assert "rank 1 on node2 failed" in error["traceback"], error["traceback"]
    out = kernel.ok("print('TOOK', time.monotonic() - t0)")
    assert float(out.split("TOOK")[1].split()[0]) < 60, out
    _nothing_left(kernel, ray_bed)


def test_an_interrupt_stops_every_node(kernel: LoginKernel, ray_bed: RayBed) -> None:
    done = kernel.run(
        """
caught = None
def forever():
    print("running", flush=True)
    time.sleep(600)
try:
    notebook_launcher(forever, hosts="ray")
except KeyboardInterrupt as exc:
    caught = type(exc).__name__
""",
        timeout=12,  # the driver interrupts the kernel then (the ranks run by then)
    )
    assert done["status"] == "timeout", done
    assert "running" in done["stdout"], done
    out = kernel.ok("time.sleep(1); print('CAUGHT', caught)")
    assert "CAUGHT KeyboardInterrupt" in out, out
    _nothing_left(kernel, ray_bed)


def test_a_node_lost_mid_run_is_named(kernel: LoginKernel, ray_bed: RayBed) -> None:
    """node2 dies (every process of it killed) while the ranks wait: MachineLostError naming
    it, the rank on node1 stopped, and the node brought back for the tests after."""
    answer: dict[str, object] = {}

    def run() -> None:
        answer.update(
            kernel.run(
                """
def wait_long():
    print("waiting", flush=True)
    time.sleep(300)
try:
    notebook_launcher(wait_long, hosts="ray", node_timeout=10)
except Exception as exc:
    lost = exc
print("LOST", type(lost).__name__, lost)
""",
                timeout=240,
            )
        )

    runner = threading.Thread(target=run)
    runner.start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # both agents and both ranks run (one process table)
            found = ray_bed.run("node2", ["pgrep", "-f", "nbaccel.launch.agent"]).stdout.split()
            if len(found) >= 4:
                break
            time.sleep(0.5)
        time.sleep(1)
        ray_bed.kill_node("node2")
        runner.join(120)
        out = str(answer.get("stdout", ""))
        assert "LOST MachineLostError machine 1 (node2) was lost" in out, answer
    finally:
        ray_bed.restart_node("node2")
    _nothing_left(kernel, ray_bed)


def test_bad_input_is_refused_before_any_rank_starts(kernel: LoginKernel) -> None:
    out = kernel.ok(
        """
for case in ("too many", "too few CPUs", "no cluster"):
    t0 = time.monotonic()
    try:
        if case == "too many":
            notebook_launcher(train, (1.0,), num_nodes=3, hosts="ray")
        elif case == "too few CPUs":
            notebook_launcher(train, (1.0,), num_processes=2, hosts="ray")
        else:
            import ray, os
            ray.shutdown()
            os.environ["RAY_ADDRESS"] = "203.0.113.99:6379"
            try:
                notebook_launcher(train, (1.0,), hosts="ray", connect_timeout=2)
            finally:
                os.environ["RAY_ADDRESS"] = "203.0.113.1:6379"
    except Exception as exc:
        print("CASE", case, type(exc).__name__, round(time.monotonic() - t0), "|", exc)
print("LEFT", left())
""",
        timeout=120,
    )
    assert "CASE too many ValueError" in out, out
    assert "num_nodes=3 with 1 CPU(s) each (num_processes=1) was asked" in out, out
    assert "has 2 such node(s) among its 3 alive" in out, out
    assert "CASE too few CPUs ValueError" in out, out
    assert "at least one node with 2 CPU(s) each (num_processes=2) was asked" in out, out
    assert "CASE no cluster ConnectionError" in out, out
    assert "nothing answers at RAY_ADDRESS=203.0.113.99:6379 within 2s" in out, out
    for line in out.splitlines():
        if line.startswith("CASE"):
            assert int(line.split("|")[0].split()[-1]) < 15, line
    assert "LEFT []" in out, out


def test_a_node_cut_off_mid_run_is_named_after_node_timeout(
    kernel: LoginKernel, ray_bed: RayBed
) -> None:
    """node2's cable is pulled while the ranks wait: nothing more is heard from its agent, and
    after node_timeout the run ends with MachineLostError naming it."""
    answer: dict[str, object] = {}
    code = """
try:
    notebook_launcher(lambda: time.sleep(300), hosts="ray", node_timeout=8)
except Exception as exc:
    print("LOST", type(exc).__name__, exc)
"""
    runner = threading.Thread(target=lambda: answer.update(kernel.run(code, timeout=240)))
    runner.start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # both agents and both ranks run (one process table)
            found = ray_bed.run("node2", ["pgrep", "-f", AGENT]).stdout.split()
            if len(found) >= 4:
                break
            time.sleep(0.5)
        time.sleep(1)
        ray_bed.cut("node2")
        runner.join(120)
        out = str(answer.get("stdout", ""))
        assert "LOST MachineLostError machine 1 (node2) was lost: nothing was heard" in out, answer
    finally:
        ray_bed.restart_node("node2")
    _nothing_left(kernel, ray_bed)


def test_other_versions_are_refused_naming_both(
    kernel: LoginKernel, ray_bed: RayBed, tmp_path: Path
) -> None:
    wrapper = tmp_path / "other-nbaccel"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"exec {sys.executable} -c \"import nbaccel.version as v; v.__version__ = '0.0.1'; "
        f"import runpy; runpy.run_module('{AGENT}', run_name='__main__')\"\n"
    )
    wrapper.chmod(0o755)
    out = kernel.ok(
        f"""
try:
    notebook_launcher(print, hosts="ray", python={str(wrapper)!r})
except Exception as exc:
    print("RAISED", type(exc).__name__, exc)
""",
        timeout=240,
    )
    assert "RAISED HostError node1 runs nbaccel 0.0.1, but this notebook runs nbaccel" in out, out
    _nothing_left(kernel, ray_bed)
