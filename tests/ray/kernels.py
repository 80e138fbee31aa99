"""A Jupyter kernel on the Ray bed's login machine (the head), the notebook a Ray user has: it
joins the cluster as a driver (``RAY_ADDRESS``) when its first ``hosts="ray"`` launch starts.

:data:`LEFT` is what the kernel defines first: ``left()`` lists what nbaccel started and is
still there, by Ray's own state API (actors not dead, placement groups not removed) and by the
shared process table (agents and their ranks); ``left_after(s)`` waits up to ``s`` seconds
for it to be empty. :func:`ray_kernel` also checks the nodes' listening sockets: after the
kernel ended, each node listens on what it listened on before (Ray's own ports only).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

from tests.hosts.login_kernel import AGENT, LoginKernel, agents_left_after
from tests.ray.bed_ray import RayBed

LEFT = """
import socket, subprocess, time

def left():
    from ray.util.state import list_actors, list_placement_groups
    live = list_actors(filters=[("state", "!=", "DEAD")])
    placed = list_placement_groups(filters=[("state", "!=", "REMOVED")])
    actors = [f"actor {a.class_name} {a.state}" for a in live]
    groups = [f"group {g.placement_group_id} {g.state}" for g in placed]
    found = subprocess.run(["pgrep", "-f", "@AGENT@"], capture_output=True, text=True)
    return actors + groups + [f"process {pid}" for pid in found.stdout.split()]

def left_after(seconds):
    deadline = time.monotonic() + seconds
    while (now := left()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return now
""".replace("@AGENT@", AGENT)

# A closure that all-reduces across the nodes and says where each rank ran.
CLOSURE = """
def train(x):
    import torch, torch.distributed as dist
    from nbaccel import PartialState
    state = PartialState()
    t = torch.tensor([float(state.process_index + 1)])
    dist.all_reduce(t)
    print(f"same line from every rank", flush=True)
    return socket.gethostname(), state.process_index, float(t) * x
"""


def nbaccel_listeners(bed: RayBed, machine: str) -> list[str]:
    """The TCP listeners on ``machine`` owned by a process of nbaccel's: an agent, a rank, or
    a Ray worker that runs an ``AgentHost`` actor (read from each owner's command line)."""
    done = bed.run(machine, ["ss", "-Hltnp"], timeout=30)
    found = []
    for line in done.stdout.splitlines():
        for pid in re.findall(r"pid=(\d+)", line):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if b"nbaccel" in command or b"AgentHost" in command:
                found.append(f"{line.split()[3]} {command.decode(errors='replace')[:120]}")
    return found


@contextlib.contextmanager
def ray_kernel(bed: RayBed, cwd: Path, setup: str = "") -> Iterator[LoginKernel]:
    """A login kernel that ran :data:`LEFT`, :data:`CLOSURE` and ``setup``; once it ended, no
    agent or rank is left and no node has a listener of nbaccel's."""
    kernel = LoginKernel(bed, cwd)  # type: ignore[arg-type]  # the bed has popen() and env()
    done = kernel.run(LEFT + CLOSURE + setup, timeout=120)
    assert done["error"] is None, done
    try:
        yield kernel
    finally:
        kernel.stop()
    assert agents_left_after(20) == []
    for node in ("node1", "node2"):
        assert nbaccel_listeners(bed, node) == [], node
