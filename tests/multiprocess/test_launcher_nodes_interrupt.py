"""Several nodes over loopback, a node that never arrives, and interrupting a launch."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import launcher_helpers as h
import pytest

from nbaccel import notebook_launcher
from nbaccel.launch.events import RankStateEvent
from tests.support.paths import pythonpath

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]

# How long a stop or a reported timeout may take beyond what was asked, on a loaded 2-core
# machine: these tests show that the launch ends, not how fast (benchmarks/ measure speed).
SLACK_S = 30.0

NODE_SCRIPT = """
import json, os, sys

import torch
import torch.distributed as dist

from nbaccel import PartialState, notebook_launcher


def train(scale):
    state = PartialState()
    value = torch.tensor([scale * state.process_index])
    dist.all_reduce(value)
    return {
        "rank": state.process_index,
        "local_rank": state.local_process_index,
        "world": state.num_processes,
        "sum": value.item(),
        "ppid": os.getppid(),
    }


node, port, form = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
if form == "use_port":
    where = {"master_addr": "127.0.0.1", "use_port": port}
elif form == "rdzv_endpoint":
    where = {"rdzv_endpoint": f"127.0.0.1:{port}"}
else:
    where = {"rdzv_endpoint": f"127.0.0.1:{port}", "rdzv_backend": "c10d", "rdzv_id": "job7"}
results = notebook_launcher(
    train, (2.0,), num_processes=2, num_nodes=2, node_rank=node, rendezvous_timeout=60, **where
)
print("RESULT " + json.dumps({"pid": os.getpid(), "results": results}), flush=True)
"""

INTERRUPT_SCRIPT = """
import sys

import launcher_helpers

from nbaccel import notebook_launcher

notebook_launcher(launcher_helpers.sleep_forever, num_processes=2, start_method=sys.argv[1])
"""


@pytest.mark.parametrize("form", ["use_port", "rdzv_endpoint", "c10d"])
def test_launcher_two_nodes_over_loopback(
    form: str,
    tmp_path: Path,
    free_port: Callable[[], int],
    subprocess_environ: Callable[..., dict[str, str]],
) -> None:
    script = tmp_path / "node.py"
    script.write_text(NODE_SCRIPT)
    port = free_port()
    nodes = [
        subprocess.Popen(
            [sys.executable, str(script), str(node), str(port), form],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_environ(),
            cwd=tmp_path,
        )
        for node in (0, 1)
    ]
    outputs = []
    try:
        for node in nodes:
            out, err = node.communicate(timeout=90)
            assert node.returncode == 0, f"node failed:\n{out}\n{err}"
            outputs.append(out)
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.wait()
    firsts = []
    for node_rank, out in enumerate(outputs):
        (line,) = [x for x in out.splitlines() if x.startswith("RESULT ")]
        payload = json.loads(line[len("RESULT ") :])
        results: list[dict[str, Any]] = payload["results"]
        # c10d assigns node ranks in order of arrival; the static forms keep node_rank
        first = results[0]["rank"] if form == "c10d" else 2 * node_rank
        firsts.append(first)
        assert [r["rank"] for r in results] == [first, first + 1]
        assert [r["local_rank"] for r in results] == [0, 1]
        assert all(r["world"] == 4 for r in results)
        assert all(r["sum"] == 2.0 * (0 + 1 + 2 + 3) for r in results)  # all four ranks met
        assert all(r["ppid"] == payload["pid"] for r in results)  # each node ran its own
        assert "of 2" in out
    assert sorted(firsts) == [0, 2]


def test_launcher_node_that_never_arrives_times_out(free_port: Callable[[], int]) -> None:
    port = free_port()
    before = h.child_pids()
    started = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        notebook_launcher(
            h.local_rank_env,
            num_processes=2,
            num_nodes=2,
            node_rank=0,
            master_addr="127.0.0.1",
            use_port=port,
            rendezvous_timeout=3,
            start_method="fork",
        )
    elapsed = time.monotonic() - started
    message = str(info.value)
    assert "[1]" in message and "node" in message, message
    assert "rendezvous_timeout" in message
    assert elapsed < 3 + SLACK_S, f"the missing node was reported only after {elapsed:.1f}s"
    assert h.child_pids() == before, "workers started although a node was missing"
    assert h.launch(h.local_rank_env, use_port=port) == [0, 1], "the port was not released"


def test_launcher_main_node_that_never_answers_times_out(free_port: Callable[[], int]) -> None:
    port = free_port()  # nothing listens here
    before = h.child_pids()
    started = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        notebook_launcher(
            h.local_rank_env,
            num_processes=2,
            num_nodes=2,
            node_rank=1,
            master_addr="127.0.0.1",
            use_port=port,
            rendezvous_timeout=3,
        )
    assert time.monotonic() - started < 3 + SLACK_S
    assert f"127.0.0.1:{port}" in str(info.value)
    assert h.child_pids() == before


# -- interrupting -------------------------------------------------------------------------------


def _read_worker_pids(proc: subprocess.Popen[bytes], count: int, within: float) -> list[int]:
    assert proc.stdout is not None
    deadline, buffer, pids = time.monotonic() + within, b"", []
    while len(pids) < count:
        left = deadline - time.monotonic()
        assert left > 0, f"workers did not start: {buffer!r}"
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if not ready:
            continue
        chunk = os.read(proc.stdout.fileno(), 4096)
        assert chunk, f"the launcher ended early: {buffer!r}"
        buffer += chunk
        words = [line.split() for line in buffer.decode().splitlines() if "WORKER-PID" in line]
        pids = [int(w[-1]) for w in words if w[-1].isdigit()]
    return pids


@pytest.mark.parametrize(
    ("method", "target"),
    [("fork", "process"), ("fork", "group"), ("spawn", "group")],
)
def test_launcher_sigint_in_a_terminal_stops_every_worker(
    method: str, target: str, tmp_path: Path, subprocess_environ: Callable[..., dict[str, str]]
) -> None:
    """SIGINT to the script's process, or to its whole process group as Ctrl-C in a terminal
    (and jupyter_client's interrupt) sends it."""
    script = tmp_path / "interrupt.py"
    script.write_text(INTERRUPT_SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), method],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # the script imports launcher_helpers from this folder
        env=subprocess_environ(PYTHONPATH=pythonpath(Path(h.__file__).parent)),
        start_new_session=True,  # its own process group, like a terminal's foreground job
    )
    try:
        workers = _read_worker_pids(proc, 2, within=60)
        assert all(not h.is_dead(pid) for pid in workers)
        if target == "group":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=SLACK_S)  # a hang fails here
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert b"KeyboardInterrupt" in err, err.decode(errors="replace")[-2000:]
    assert proc.returncode != 0
    deadline = time.monotonic() + SLACK_S
    while not all(h.is_dead(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(h.is_dead(pid) for pid in workers), "a worker survived the interrupt"


def test_launcher_interrupt_in_the_kernel_stops_workers_and_next_launch_works() -> None:
    before = h.child_pids()
    running: set[int] = set()

    def interrupt_when_all_run(event: object) -> None:
        if isinstance(event, RankStateEvent) and event.state == "running":
            running.add(event.rank)
            if running == {0, 1}:
                # what the kernel does on "interrupt": SIGINT to this process
                os.kill(os.getpid(), signal.SIGINT)

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        h.launch(h.sleep_forever, on_event=interrupt_when_all_run)
    assert time.monotonic() - started < SLACK_S
    assert running == {0, 1}
    h.assert_clean_then_next_launch_works(before)


@pytest.mark.parametrize(
    "method",
    [
        "fork",
        "spawn",
    ],
)
def test_launcher_workers_run_in_their_own_session(method: str) -> None:
    results = h.launch(h.session_ids, start_method=method)
    for sid, pgid in results:
        assert sid != os.getsid(0), "the worker shares the launcher's session"
        assert pgid != os.getpgrp(), "the worker shares the launcher's process group"
