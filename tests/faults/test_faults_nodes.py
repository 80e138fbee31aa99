"""Point 4: multi-node faults over loopback.

A node that never arrives is covered by
tests/multiprocess/test_launcher_nodes_interrupt.py::test_launcher_node_that_never_arrives_times_out
(and ::test_launcher_main_node_that_never_answers_times_out for a main node that is not
there): a TimeoutError naming the missing node after ``rendezvous_timeout``, no worker started,
the port released. This module kills a node in the middle of a 2-node training run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import fault_helpers as fh
import pytest
from test_faults_interrupts import _wait_for

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]

# From the death of node 1 to the end of node 0's launch. gloo sees the closed connections at
# once; a hang would last the 30-minute collective timeout. A correctness bound.
NODE_LOSS_BOUND_S = 15.0
TARGET = Path(__file__).parent / "node_target.py"


def test_node_dying_mid_run_stops_the_other_node_with_a_clear_error(
    tmp_path: Path, record: Callable[..., None]
) -> None:
    """Promise: when node 1 dies (SIGKILL to its notebook process; its worker dies with it)
    at step 3, node 0's launch ends promptly with an error that names its rank and the lost
    connection, and no process of either node is left."""
    tag = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NBACCEL_", "RANK"))}
    env.update(NBACCEL_FAULT_TAG=tag, TMPDIR=str(tmp_path), PYTHONUNBUFFERED="1")
    port = fh.free_port()
    nodes = [
        subprocess.Popen(
            [sys.executable, str(TARGET), str(node), str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        for node in (0, 1)
    ]
    try:
        _wait_for(nodes[1], "STEP 3")
        assert len(fh.processes_tagged(tag)) == 4, "2 notebook processes and 2 workers run"
        nodes[1].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        out, err = nodes[0].communicate(timeout=NODE_LOSS_BOUND_S + 30)
        elapsed = time.monotonic() - killed
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
            node.communicate()
    text = out.decode(errors="replace") + err.decode(errors="replace")
    assert nodes[0].returncode != 0 and "FINISHED" not in text, text[-3000:]
    assert "rank 0 failed" in text, text[-3000:]
    assert "Connection closed by peer" in text or "Connection reset" in text, text[-3000:]
    assert elapsed < NODE_LOSS_BOUND_S, f"node 0 stopped {elapsed:.1f}s after node 1 died"
    deadline = time.monotonic() + 5
    while fh.processes_tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fh.processes_tagged(tag) == [], "processes outlived the lost node"
    assert list(tmp_path.iterdir()) == [], "temporary files left behind"
    error_line = next(line for line in text.splitlines() if "rank 0 failed" in line)
    record(seconds=round(elapsed, 2), error=error_line[:200])
