"""Point 2: interrupts. SIGINT reaches the notebook's process (a script standing in for the
kernel, so that the signal goes to it alone) during start-up, during training, during a
checkpoint save, and twice in a row; and a real Jupyter kernel is interrupted through its
manager, twice in a row.

The promise checked every time: the process raises KeyboardInterrupt within
``INTERRUPT_BOUND_S``; afterwards no process the launch started is alive (every process is
tagged through its environment and searched for machine-wide), the rendezvous port is free
again, the temporary directory and /dev/shm hold nothing new, and a checkpoint directory holds
only complete checkpoints (the newest of which loads).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import fault_helpers as fh
import pytest

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(90)]

# From the SIGINT to the end of the interrupted process: the launcher sends SIGTERM and
# SIGKILLs after 2 s at most; Python's shutdown follows. A correctness bound, not a benchmark.
INTERRUPT_BOUND_S = 8.0
TARGET = Path(__file__).parent / "interrupt_target.py"


def _start(phase: str, project: Path, tmpdir: Path, tag: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NBACCEL_", "RANK"))}
    env.update(NBACCEL_FAULT_TAG=tag, TMPDIR=str(tmpdir), PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, str(TARGET), phase, str(project)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )


def _wait_for(proc: subprocess.Popen[bytes], needle: str, within: float = 60.0) -> str:
    """Read the process's stdout until a line holds ``needle``; return everything read."""
    assert proc.stdout is not None
    deadline, text = time.monotonic() + within, ""
    while needle not in text:
        left = deadline - time.monotonic()
        assert left > 0, f"never saw {needle!r}:\n{text[-2000:]}"
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 65536)
            assert chunk, f"the process ended before {needle!r}:\n{text[-2000:]}"
            text += chunk.decode(errors="replace")
    return text


def _interrupt(proc: subprocess.Popen[bytes], times: int) -> tuple[float, str, str]:
    started = time.monotonic()
    for i in range(times):
        if i:
            time.sleep(0.2)  # the second arrives while the launcher stops the workers
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=INTERRUPT_BOUND_S + 10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return time.monotonic() - started, out.decode(errors="replace"), err.decode(errors="replace")


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _assert_nothing_left(tag: str, tmpdir: Path, shm_before: set[str]) -> None:
    deadline = time.monotonic() + 5
    while fh.processes_tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fh.processes_tagged(tag) == [], "processes of the launch outlived the interrupt"
    assert sorted(p.name for p in tmpdir.iterdir()) == [], "temporary files left behind"
    assert fh.shm_entries() - shm_before == set(), "/dev/shm entries left behind"


@pytest.mark.parametrize(
    ("phase", "trigger", "times"),
    [
        ("startup", "Launching 2 processes", 1),
        ("training", "STEP 3", 1),
        ("training", "STEP 3", 2),
        ("saving", "SAVING", 1),
    ],
    ids=["start-up", "training", "training-twice", "checkpoint-save"],
)
def test_sigint_to_the_notebook_process_stops_everything(
    phase: str, trigger: str, times: int, tmp_path: Path, record: Callable[..., None]
) -> None:
    """Promise: SIGINT (Ctrl-C, or the kernel's interrupt) stops the launch at any phase,
    once or twice in a row, and leaves nothing behind."""
    tag, tmpdir, project = uuid.uuid4().hex, tmp_path / "tmp", tmp_path / "project"
    tmpdir.mkdir()
    shm_before = fh.shm_entries()
    proc = _start(phase, project, tmpdir, tag)
    try:
        seen = _wait_for(proc, trigger)
        if phase != "startup":
            assert len(fh.processes_tagged(tag)) == 3, "the launcher and its 2 workers run"
    finally:
        elapsed, out, err = _interrupt(proc, times)
    assert "KeyboardInterrupt" in err, err[-2000:]
    assert "FINISHED" not in out
    assert proc.returncode != 0
    assert elapsed < INTERRUPT_BOUND_S, f"the interrupt took {elapsed:.1f}s"
    _assert_nothing_left(tag, tmpdir, shm_before)
    staging = sorted(p.name for p in (project / "checkpoints").glob(".*"))
    record(seconds=round(elapsed, 2), hidden_staging=staging)
    ports = [int(line.split()[-1]) for line in (seen + out).splitlines() if " PORT " in line]
    assert all(_port_free(port) for port in ports), ports
    if phase == "saving":
        assert staging == [], staging  # the save stopped by SIGTERM removed its own
        root = project / "checkpoints"
        assert fh.incomplete_checkpoints(root) == []
        assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == [
            "checkpoint_0"
        ]
        from nbaccel import notebook_launcher

        resumed = notebook_launcher(
            fh.resume_point, (str(project),), num_processes=2, start_method="fork"
        )
        assert resumed == [(1, 1), (1, 1)], "the newest complete checkpoint does not load"
