"""Launch cells that the ssh and the SLURM tests share: a rank failing on node2, and an
interrupt. ``hosts`` is the cell's ``hosts=`` argument as code; ``left`` an expression the
kernel prints to show what is left behind, and ``nothing`` how it prints when nothing is."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.hosts.bed import HostBed
from tests.hosts.login_kernel import AGENT, LoginKernel, agents_left_after

# What a test kernel defines first: ``gone()``, the agents and ranks still running (every
# machine of the bed shares one process table, so one pgrep sees node1's and node2's), and
# ``gone_after(s)``, the same once they had ``s`` seconds to end (a cut machine's agent stops
# its ranks only after node_timeout).
GONE = """
import socket, time

def gone():
    import subprocess
    found = subprocess.run(["pgrep", "-f", "@AGENT@"], capture_output=True, text=True)
    return found.stdout.split()

def gone_after(seconds):
    deadline = time.monotonic() + seconds
    while gone() and time.monotonic() < deadline:
        time.sleep(0.5)
    return gone()
""".replace("@AGENT@", AGENT)


@contextlib.contextmanager
def module_kernel(bed: HostBed, cwd: Path, setup: str) -> Iterator[LoginKernel]:
    """A login kernel that ran :data:`GONE` and ``setup``; once it ended, no agent, no rank and
    no listening socket of what it started is left on either node."""
    listening = {node: bed.listening(node) for node in ("node1", "node2")}
    kernel = LoginKernel(bed, cwd)
    done = kernel.run(GONE + setup, timeout=120)
    assert done["error"] is None, done
    try:
        yield kernel
    finally:
        kernel.stop()
    assert agents_left_after(15) == []
    for node, before in listening.items():
        assert bed.listening(node) == before, node


# A notebook closure that all-reduces across every host and says where it ran; ``EXTRA`` is
# one more value each rank returns (an expression of the cell's own).
CLOSURE = """
def make(scale):
    def train(x):
        import torch, torch.distributed as dist
        from nbaccel import PartialState
        state = PartialState()
        t = torch.tensor([float(state.process_index + 1)])
        dist.all_reduce(t)
        extra = EXTRA
        print(f"hello from {socket.gethostname()} as {state.process_index}", flush=True)
        return socket.gethostname(), state.process_index, float(t) * scale * x, *extra
    return train
"""


def closure(extra: str = "()") -> str:
    """:data:`CLOSURE` whose ranks also return the values of the tuple ``extra``."""
    return CLOSURE.replace("EXTRA", extra)


def check_a_rank_failing_on_node2(kernel: LoginKernel, hosts: str, left: str, nothing: str) -> None:
    """Rank 3 raises on node2 while the others sleep: its own exception reaches the cell,
    naming rank and host, within a minute, and nothing is left."""
    done = kernel.run(
        f"""
def boom():
    from nbaccel import PartialState
    state = PartialState()
    if socket.gethostname() == "node2" and state.process_index == 3:
        raise ValueError("bad value on node2")
    time.sleep(120)  # the others wait: the launcher stops them

t0 = time.monotonic()
notebook_launcher(boom, num_processes=2, hosts={hosts})
""",
        timeout=180,
    )
    error = done["error"]
    assert error is not None and error["ename"] == "ValueError", done
    assert "bad value on node2" in error["traceback"]
    assert "rank 3 on node2 failed" in error["traceback"], error["traceback"]
    out = kernel.ok(f"print('TOOK', time.monotonic() - t0, 'LEFT', {left})")
    assert f"LEFT {nothing}" in out, out
    assert float(out.split("TOOK")[1].split()[0]) < 60, out


def check_an_interrupt(kernel: LoginKernel, hosts: str, left: str, nothing: str) -> None:
    """A launch that runs until the kernel is interrupted: ``KeyboardInterrupt`` in the cell,
    nothing left."""
    done = kernel.run(
        f"""
caught = None
def forever():
    print("running", flush=True)
    time.sleep(600)
try:
    notebook_launcher(forever, num_processes=1, hosts={hosts})
except KeyboardInterrupt as exc:
    caught = type(exc).__name__
""",
        timeout=12,  # the driver interrupts the kernel then (the ranks run by then)
    )
    assert done["status"] == "timeout", done
    assert "running" in done["stdout"], done  # the interrupt came while the rank ran
    out = kernel.ok(f"time.sleep(1); print('CAUGHT', caught, 'LEFT', {left})")
    assert f"CAUGHT KeyboardInterrupt LEFT {nothing}" in out, out


@contextlib.contextmanager
def node2_cut_during(
    kernel: LoginKernel, bed: HostBed, code: str, started: Callable[[], None]
) -> Iterator[tuple[str, float]]:
    """Run the cell ``code`` in the background, wait for ``started()``, cut node2's cable and
    wait (up to 120 s) for the cell: yields its output and the seconds from the cut to its
    end; node2 is plugged back in when the block ends."""
    answer: dict[str, object] = {}
    runner = threading.Thread(target=lambda: answer.update(kernel.run(code, timeout=180)))
    runner.start()
    started()
    cut_at = time.monotonic()
    bed.cut("node2")
    try:
        runner.join(120)
        ended = time.monotonic() - cut_at
        yield str(answer.get("stdout", "")) + str(answer.get("stderr", "")), ended
    finally:
        bed.restore("node2")
