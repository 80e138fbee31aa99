"""The XLA launch from a real Jupyter kernel: the function's output reaches the cell."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager
from xla_helpers import ROOT

_CELL = """
import os
from nbaccel import PartialState, notebook_launcher

def work(k):
    state = PartialState()
    print(f"core {state.process_index} on {state.device} pid {os.getpid()}", flush=True)
    return k * 2

print("PARENT", os.getpid())
print("POOL", notebook_launcher(work, (3,)))
print("HERE", notebook_launcher(work, (4,), num_processes=1))
"""


@pytest.fixture
def kernel() -> Iterator[BlockingKernelClient]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NBACCEL_", "TPU_"))}
    env.update(PJRT_DEVICE="CPU", PYTHONPATH=str(ROOT))
    manager = KernelManager(
        kernel_cmd=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    )
    manager.start_kernel(env=env, cwd=str(ROOT))
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def _run_cell(client: BlockingKernelClient, code: str, timeout: float = 200) -> tuple[str, str]:
    """Run ``code``; return its stdout and its error (empty when none)."""
    msg_id = client.execute(code)
    stdout, error = [], ""
    deadline = time.monotonic() + timeout
    while True:
        msg = client.get_iopub_msg(timeout=max(1.0, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream" and content["name"] == "stdout":
            stdout.append(content["text"])
        elif kind == "error":
            error = f"{content['ename']}: {content['evalue']}"
        elif kind == "status" and content["execution_state"] == "idle":
            return "".join(stdout), error


def test_xla_launch_output_reaches_the_cell(kernel: BlockingKernelClient) -> None:
    out, error = _run_cell(kernel, _CELL)
    assert error == ""
    lines = {line.split(" ", 1)[0]: line for line in out.splitlines() if line}
    parent = lines["PARENT"].split()[1]
    assert lines["POOL"] == "POOL [6]" and lines["HERE"] == "HERE [8]"
    cores = [line for line in out.splitlines() if line.startswith("core 0 on xla:0 pid ")]
    pids = [line.rsplit(" ", 1)[1] for line in cores]
    # the pool's forked worker printed too, not only the kernel's own process
    assert len(pids) == 2 and pids[0] != parent and pids[1] == parent
    assert "Launching on the XLA device (CPU, every core of this host)." in out
