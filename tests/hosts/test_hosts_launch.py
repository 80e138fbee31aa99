"""notebook_launcher(..., hosts=[...]) from a real Jupyter kernel on the bed's login machine:
the ranks run on node1 and node2, started over ssh (one agent per host), and nothing is left
behind on any host, whatever way the launch ends."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nbaccel.environment import deepspeed_ops_folder
from tests.hosts.bed import HostBed
from tests.hosts.launches import (
    GONE,
    check_a_rank_failing_on_node2,
    check_an_interrupt,
    closure,
    module_kernel,
    node2_cut_during,
)
from tests.hosts.login_kernel import AGENT, LoginKernel, agents_left_after
from tests.hosts.shown_memory import SHOWN_MEMORY

SETUP = "from nbaccel import notebook_launcher\n"


def _remote_pids(bed: HostBed, node: str) -> list[str]:
    """The agents (and their forked ranks) that ``ssh node pgrep`` finds."""
    # "[n]baccel...": the pattern does not match the remote shell's own command line
    done = bed.run("login", ["ssh", node, f"pgrep -f '[n]{AGENT[1:]}' || true"], timeout=30)
    assert done.returncode == 0, done.stderr
    return [pid for pid in done.stdout.split() if pid.strip()]


@pytest.fixture(scope="module")
def kernel(host_bed: HostBed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoginKernel]:
    """The module's kernel: after every launch of the module, however each ended, nothing is
    left on either node (:func:`module_kernel`)."""
    with module_kernel(host_bed, tmp_path_factory.mktemp("hosts-kernel"), SETUP) as kernel:
        yield kernel


def test_closure_runs_on_every_host_in_rank_order(kernel: LoginKernel, host_bed: HostBed) -> None:
    out = kernel.ok(
        closure()
        + """
results = notebook_launcher(make(2.0), (1.5,), num_processes=2, hosts=["node1", "node2"])
print("RESULTS", results)
print("LEFT", gone())
""",
    )
    expected = [("node1", 0, 30.0), ("node1", 1, 30.0), ("node2", 2, 30.0), ("node2", 3, 30.0)]
    assert f"RESULTS {expected}" in out, out
    for rank, node in ((0, "node1"), (1, "node1"), (2, "node2"), (3, "node2")):
        assert f"[{node} rank{rank}]: hello from {node} as {rank}\n" in out, out
    assert "LEFT []" in out, out
    assert _remote_pids(host_bed, "node1") == []


def test_the_notebooks_machine_may_be_one_of_the_hosts(
    host_bed: HostBed, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A kernel on node1 launching on node1 and node2: its own machine is reached over ssh like
    the other, serves the store, and runs ranks 0 and 1."""
    kernel = LoginKernel(host_bed, tmp_path_factory.mktemp("node1-kernel"), machine="node1")
    try:
        out = kernel.ok(
            GONE
            + SETUP
            + closure()
            + """
print("RESULTS", notebook_launcher(make(1.0), (1.0,), num_processes=2,
                                   hosts=["node1", "node2"]))
"""
        )
    finally:
        kernel.stop()
    expected = [("node1", 0, 10.0), ("node1", 1, 10.0), ("node2", 2, 10.0), ("node2", 3, 10.0)]
    assert f"RESULTS {expected}" in out, out
    assert agents_left_after(15) == []


def test_a_rank_raising_on_node2_raises_in_the_cell(kernel: LoginKernel, host_bed: HostBed) -> None:
    check_a_rank_failing_on_node2(kernel, '["node1", "node2"]', "gone()", "[]")
    assert _remote_pids(host_bed, "node1") == [] and _remote_pids(host_bed, "node2") == []


def test_the_kernels_switches_and_env_reach_every_rank(kernel: LoginKernel) -> None:
    """The allow-listed variables of the kernel (NCCL_DEBUG, WANDB_MODE) reach every rank on
    every host, a variable off the list (MY_KERNEL_ONLY) does not, and env= wins."""
    out = kernel.ok(
        """
import os
os.environ.update(NCCL_DEBUG="WARN", WANDB_MODE="offline", MY_KERNEL_ONLY="here")
def seen():
    import os
    return tuple(os.environ.get(n) for n in ("NCCL_DEBUG", "WANDB_MODE", "MY_KERNEL_ONLY", "MINE"))
try:
    print("SEEN", set(notebook_launcher(seen, num_processes=1, hosts=["node1", "node2"],
                                        env={"MINE": "1", "WANDB_MODE": "disabled"})))
finally:
    for name in ("NCCL_DEBUG", "WANDB_MODE", "MY_KERNEL_ONLY"):
        del os.environ[name]
"""
    )
    assert "SEEN {('WARN', 'disabled', None, '1')}" in out, out


def test_the_dashboard_shows_every_rank_of_every_host(kernel: LoginKernel) -> None:
    """Every rank beside its machine, with the memory its host's agent measured: each rank
    reads its own RSS and stays until the dashboard's figure for it is within a quarter of
    that (a pid means nothing here; :data:`SHOWN_MEMORY`)."""
    out = kernel.ok(
        SHOWN_MEMORY
        + """
import io, shutil
from nbaccel.widgets import TextDashboard
board, figures = TextDashboard(io.StringIO()), tempfile.mkdtemp()
own = notebook_launcher(own_rss_once_shown, (figures,), num_processes=2, hosts=["node1", "node2"],
                        dashboard=board, on_event=when_shown(board, figures, range(4)))
shutil.rmtree(figures)
print(board.summary())
shown = [board.ranks[rank].rss for rank in range(4)]
print("RSS", [near(s, o) for s, o in zip(shown, own)], shown, own)
print("LEFT", gone())
""",
    )
    assert "on 2 machines: node1, node2" in out, out
    for rank in range(4):
        assert f"  rank {rank} (node{1 + rank // 2}): finished" in out, out
    assert "RSS [True, True, True, True]" in out, out
    assert "LEFT []" in out, out


def test_rank_0s_rich_display_and_progress_bar_reach_the_cell(kernel: LoginKernel) -> None:
    """Rank 0 runs on node1: its HTML and its ``tqdm.auto`` bar are drawn in this cell (a
    notebook bar, not text), the other ranks' are not."""
    done = kernel.run(
        """
def show():
    import os
    from IPython.display import HTML, display
    from tqdm.auto import tqdm
    rank = os.environ["RANK"]
    display(HTML(f"<b>hello from {rank} on {socket.gethostname()}</b>"))
    for _ in tqdm(range(30), desc=f"steps{rank}"):
        pass
    return rank
notebook_launcher(show, num_processes=2, hosts=["node1", "node2"])
"""
    )
    assert done["error"] is None, done
    html = [d["data"].get("text/html", "") for d in done["displays"] if "data" in d]
    assert [h for h in html if "hello from" in h] == ["<b>hello from 0 on node1</b>"], done
    bars = [
        d["data"]["text/plain"]
        for d in done["displays"]
        if "application/vnd.jupyter.widget-view+json" in d.get("data", {})
    ]
    assert len(bars) == 1 and "steps0" in bars[0], done["displays"]
    values = [d["state"].get("value") for d in done["displays"] if d["kind"] == "comm_msg"]
    assert 30 in values, values
    assert "steps1" not in done["stderr"] and "steps2" not in done["stderr"], done["stderr"]


def test_max_restarts_starts_every_host_again(kernel: LoginKernel) -> None:
    out = kernel.ok(
        """
def flaky():
    from nbaccel import PartialState
    state = PartialState()
    if state.process_index == 3 and state.restart_count == 0:
        raise RuntimeError("the first attempt fails on node2")
    return socket.gethostname(), state.restart_count

print("RESULTS", notebook_launcher(flaky, num_processes=2, hosts=["node1", "node2"],
                                   max_restarts=1))
print("LEFT", gone())
""",
    )
    assert "nbaccel: attempt 1 failed (" in out and "the first attempt fails on node2" in out, out
    expected = [("node1", 1), ("node1", 1), ("node2", 1), ("node2", 1)]
    assert f"RESULTS {expected}" in out, out
    assert "LEFT []" in out, out


def test_a_stalled_rank_on_node2_is_named_with_its_host_and_line(kernel: LoginKernel) -> None:
    """Rank 3 (on node2) never reaches the all_reduce the others wait in: the stall is found
    by asking every rank through its host's agent, and the error's table names node2 and the
    line rank 3 is on."""
    out = kernel.ok(
        """
caught = None
def stall():
    import torch, torch.distributed as dist
    from nbaccel import PartialState
    state = PartialState()
    if state.process_index == 3:
        time.sleep(60)  # never reaches the all_reduce in time
    dist.all_reduce(torch.ones(4))
    return state.process_index

t0 = time.monotonic()
try:
    notebook_launcher(stall, num_processes=2, hosts=["node1", "node2"], stall_timeout=2,
                      on_stall="raise")
except TimeoutError as exc:
    caught = exc
print("KIND", caught.kind)
print("ROWS", [(r["rank"], r["host"], r["state"], r["source"]) for r in caught.where])
print("TEXT", caught)
print("TOOK", time.monotonic() - t0, "LEFT", gone())
""",
    )
    assert "KIND stall" in out, out
    rows = out.split("ROWS ")[1].split("\n")[0]
    assert "(3, 'node2', 'running', 'time.sleep(60)" in rows, rows
    for rank in (0, 1):
        assert f"({rank}, 'node1', 'in collective', 'dist.all_reduce(torch.ones(4))')" in rows
    assert "(2, 'node2', 'in collective'" in rows, rows
    assert re.search(
        r"ranks 0, 1, 2 have waited \d+ s in all_reduce \(#1, In \[\d+\], line 8\)", out
    )
    assert re.search(r"rank 3 never joined it: rank 3 is at In \[\d+\], line 7", out), out
    assert "Every rank was stopped" in out, out
    assert float(out.split("TOOK")[1].split()[0]) < 40, out
    assert "LEFT []" in out, out


def test_a_rank_gloo_aborts_on_node2_is_named_with_its_collective(kernel: LoginKernel) -> None:
    """Rank 3 (on node2) gathers another shape at once; gloo aborts a rank before any watch
    round could ask it: its agent reads the rank's note page and the cell names the call."""
    out = kernel.ok(
        """
from nbaccel import WorkerError
caught = None
def shapes():
    import torch, torch.distributed as dist
    from nbaccel import PartialState
    rank = PartialState().process_index
    size = 3 if rank == 3 else 2
    dist.all_gather([torch.zeros(size) for _ in range(4)], torch.ones(size))
    return rank

try:
    notebook_launcher(shapes, num_processes=2, hosts=["node1", "node2"], stall_timeout=None)
except Exception as exc:
    caught = exc
error = caught if isinstance(caught, WorkerError) else caught.__cause__
print("TYPE", type(caught).__name__)
print("KILLED", [(f.rank, f.host, f.collective.op, f.collective.seq, f.collective.shapes)
                 for f in error.fates if f.signal_name == "SIGABRT"])
print("TEXT", error)
print("LEFT", gone())
""",
    )
    killed = ast.literal_eval(out.split("KILLED ")[1].split("\n")[0])
    assert killed, out
    for rank, host, op, seq, shapes in killed:
        assert (host, op, seq) == ("node1" if rank < 2 else "node2", "all_gather", 1), out
        assert shapes == ((3 if rank == 3 else 2,),), out
    assert "killed by SIGABRT inside all_gather #1 on world with float32[" in out, out
    assert "LEFT []" in out, out


def test_an_unreachable_host_fails_before_any_rank_starts(kernel: LoginKernel) -> None:
    out = kernel.ok(
        """
t0 = time.monotonic()
try:
    notebook_launcher(print, num_processes=1, hosts=["node1", "nosuch.invalid"],
                      connect_timeout=5)
except Exception as exc:
    print("RAISED", type(exc).__name__, exc)
print("TOOK", time.monotonic() - t0, "LEFT", gone())
""",
    )
    assert "RAISED HostError" in out and "nosuch.invalid" in out, out
    assert "connect_timeout=5" in out, out
    assert float(out.split("TOOK")[1].split()[0]) < 20, out
    assert "LEFT []" in out, out


def test_other_versions_are_refused_naming_both(
    kernel: LoginKernel, tmp_path: Path, host_bed: HostBed
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
    notebook_launcher(print, num_processes=1, hosts=["node1", "node2"], python={str(wrapper)!r})
except Exception as exc:
    print("RAISED", type(exc).__name__, exc)
print("LEFT", gone())
""",
    )
    assert "RAISED HostError node1 runs nbaccel 0.0.1, but this notebook runs nbaccel" in out, out
    assert "LEFT []" in out, out


def test_an_interrupt_stops_every_host(kernel: LoginKernel, host_bed: HostBed) -> None:
    check_an_interrupt(kernel, '["node1", "node2"]', "gone()", "[]")
    assert _remote_pids(host_bed, "node2") == []


def test_an_interrupt_during_start_up_leaves_nothing(
    kernel: LoginKernel, tmp_path: Path, host_bed: HostBed
) -> None:
    """The kernel is interrupted while the hosts' agents are still starting (an interpreter
    that takes 8 s to come up): ``KeyboardInterrupt`` in the cell at once, no ssh process left
    here, no agent left on the hosts once their start-up ends, no new listening socket."""
    slow = tmp_path / "slow-python"
    slow.write_text(f'#!/bin/sh\nsleep 8\nexec {sys.executable} "$@"\n')
    slow.chmod(0o755)
    listening = {node: host_bed.listening(node) for node in ("node1", "node2")}
    done = kernel.run(
        f"""
caught = None
t0 = time.monotonic()
try:
    notebook_launcher(print, num_processes=1, hosts=["node1", "node2"], python={str(slow)!r})
except KeyboardInterrupt:
    caught = time.monotonic() - t0
""",
        timeout=4,  # the driver interrupts the kernel then
    )
    assert done["status"] == "timeout", done
    out = kernel.ok(
        "import subprocess\n"
        "ssh = subprocess.run(['pgrep', '-f', 'ssh -o BatchMode'], capture_output=True, "
        "text=True).stdout.split()\nprint('CAUGHT', caught, 'SSH', ssh)"
    )
    assert "CAUGHT None" not in out and "SSH []" in out, out
    assert float(out.split("CAUGHT ")[1].split()[0]) < 15, out
    deadline = time.monotonic() + 30
    while (
        time.monotonic() < deadline
        and subprocess.run(["pgrep", "-f", str(slow)], capture_output=True).stdout.split()
    ):
        time.sleep(0.5)
    assert agents_left_after(15) == []
    assert subprocess.run(["pgrep", "-f", str(slow)], capture_output=True).stdout.split() == []
    for node, before in listening.items():
        assert host_bed.listening(node) == before, node


def test_a_host_lost_mid_run_raises_machine_lost(kernel: LoginKernel, host_bed: HostBed) -> None:
    code = """
def wait():
    from nbaccel import PartialState
    PartialState()
    print("joined", flush=True)
    time.sleep(600)
t0 = time.monotonic()
try:
    notebook_launcher(wait, num_processes=1, hosts=["node1", "node2"], node_timeout=10)
except Exception as exc:
    print("RAISED", type(exc).__name__, exc)
print("TOOK", time.monotonic() - t0)
"""

    def ranks_joined() -> None:
        deadline = time.monotonic() + 90
        # two ssh clients here, two agents and their two forked ranks on the nodes
        while len(subprocess.run(["pgrep", "-f", AGENT], capture_output=True).stdout.split()) < 6:
            assert time.monotonic() < deadline, "the ranks did not start"
            time.sleep(0.5)
        time.sleep(3)  # the ranks joined their group

    with node2_cut_during(kernel, host_bed, code, ranks_joined) as (out, ended):
        assert "RAISED MachineLostError machine 1 (node2) was lost" in out, out
        # where node1's rank was then (node2's cannot answer any more)
        assert "Where every rank was when node2 was lost:" in out, out
        assert re.search(r"\n  0 +node1 +running +In \[\d+\], line \d+ +time\.sleep\(600\)", out)
        assert ended < 30, (ended, out)
        # node2's agent hears nothing from the notebook either: it stops its rank by itself
        assert agents_left_after(20) == []


def test_a_missing_working_directory_is_named(kernel: LoginKernel) -> None:
    out = kernel.ok(
        """
try:
    notebook_launcher(print, num_processes=1, hosts=["node2"], cwd="/no/such/dir")
except Exception as exc:
    print("RAISED", type(exc).__name__, exc)
print("LEFT", gone())
""",
    )
    assert "RAISED HostError rank 0 did not start on node2" in out, out
    assert "'/no/such/dir' does not exist on node2" in out and "pass cwd=" in out, out
    assert "LEFT []" in out, out


def test_deepspeed_zero2_trains_on_two_hosts(kernel: LoginKernel) -> None:
    """A function the kernel defines builds DeepSpeed's ZeRO-2 engine on node1 and node2 (4
    ranks, hosts=): every rank trains the same steps and reports its host and stage."""
    ops = deepspeed_ops_folder()  # the ops this machine built (the hosts share its disk)
    out = kernel.ok(
        f"""
def zero2():
    import socket
    import torch
    from nbaccel import Accelerator
    from nbaccel.utils import DeepSpeedPlugin
    acc = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    engine, opt, loader = acc.prepare(model, optimizer, loader)
    for x, y in loader:
        acc.backward(torch.nn.functional.mse_loss(engine(x), y))
        opt.step()
    weight = round(float(acc.get_state_dict(engine)["weight"].sum()), 6)
    stage = engine.zero_optimization_stage()
    return socket.gethostname(), acc.num_processes, stage, engine.global_steps, weight

results = notebook_launcher(zero2, num_processes=2, hosts=["node1", "node2"],
                            env={{"TORCH_EXTENSIONS_DIR": {ops!r}}}, timeout=240)
print("HOSTS", [r[:4] for r in results])
print("SAME", len({{r[4] for r in results}}) == 1)
print("LEFT", gone())
""",
        timeout=300,
    )
    expected = [("node1", 4, 2, 4), ("node1", 4, 2, 4), ("node2", 4, 2, 4), ("node2", 4, 2, 4)]
    assert f"HOSTS {expected}" in out, out
    assert "SAME True" in out and "LEFT []" in out, out
