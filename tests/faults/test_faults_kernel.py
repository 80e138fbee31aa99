"""Point 2 in a real Jupyter kernel: a training launch interrupted through the kernel's
manager (what the notebook's stop button does), once and then twice in a row.

tests/notebook/test_launcher_kernel_lifecycle.py::test_interrupt_stops_every_worker_and_the_next_launch_works
already interrupts sleeping workers three times in sequence (fork, fork, spawn) and compares
descriptors, threads, sockets and temporary files; this test interrupts a DDP training run,
and the second time sends the second interrupt while the launcher is still stopping the
workers.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

import fault_helpers as fh

from tests.support.kernel import Cell, Kernel, ProcessSnapshot, running_kernel
from tests.support.paths import pythonpath

pytestmark = [pytest.mark.notebook, pytest.mark.timeout(120)]

INTERRUPT_BOUND_S = 8.0
_SETUP = """
import fault_helpers as fh
from nbaccel import notebook_launcher
"""
_TRAIN = (
    "notebook_launcher(fh.train, kwargs={'announce': True, 'step_delay': 0.3}, "
    "num_processes=2, start_method='fork')"
)


class _Reached(Exception):
    """The cell printed the line waited for (stops collecting while it runs on)."""


def _run_until(kernel: Kernel, code: str, needle: str) -> Cell:
    cell = kernel.submit(code)

    def check(message: dict[str, Any], running: Cell) -> None:
        if needle in running.stdout:
            raise _Reached

    try:
        kernel.collect(cell, timeout=60, on_message=check)
    except _Reached:
        return cell
    raise AssertionError(f"never saw {needle!r}:\n{cell.describe()}")


def test_kernel_interrupt_once_and_twice_stops_training_and_leaves_nothing(
    tmp_path: Path, record: Callable[..., None]
) -> None:
    """Promise: each interrupt ends the cell with KeyboardInterrupt within
    INTERRUPT_BOUND_S; no worker, listening socket or temporary file is left; the next
    launch in the same kernel trains."""
    tag = uuid.uuid4().hex
    env = {"TMPDIR": str(tmp_path), "NBACCEL_FAULT_TAG": tag}
    env["PYTHONPATH"] = pythonpath(Path(__file__).parent)  # the kernel imports fault_helpers
    with running_kernel(**env) as kernel:
        kernel.ok(_SETUP)
        kernel.ok("notebook_launcher(fh.train, num_processes=2, start_method='fork'); None")
        kernel.settle()
        before = ProcessSnapshot.take(kernel.pid, str(tmp_path))
        times = []
        for interrupts in (1, 2):
            cell = _run_until(kernel, _TRAIN, "STEP 3")
            workers = [pid for pid in fh.processes_tagged(tag) if pid != kernel.pid]
            assert len(workers) == 2, workers
            started = time.monotonic()
            kernel.interrupt()
            if interrupts == 2:
                # the second interrupt while the launcher still stops the workers: one that
                # came after the cell ended would hit ipykernel's own reply code (which then
                # loses the reply), not nbaccel's
                time.sleep(0.02)
                kernel.interrupt()
            kernel.collect(cell, timeout=30)
            assert cell.finished is not None
            times.append(round(cell.finished - started, 2))
            assert cell.status == "error" and cell.ename == "KeyboardInterrupt", cell.describe()
            assert cell.finished - started < INTERRUPT_BOUND_S, times
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and len(fh.processes_tagged(tag)) > 1:
                time.sleep(0.05)
            assert fh.processes_tagged(tag) == [kernel.pid], "workers outlived the interrupt"
        done = kernel.ok(
            "r = notebook_launcher(fh.train, num_processes=2, start_method='fork'); print(len(r))"
        )
        assert done.stdout.strip().endswith("2"), done.describe()
        kernel.settle()
        after = ProcessSnapshot.take(kernel.pid, str(tmp_path))
        assert after.children == before.children, "child processes left behind"
        assert after.listening == before.listening, "listening sockets left open"
        assert after.temp_entries == before.temp_entries, "temporary files left behind"
    record(seconds_once=times[0], seconds_twice=times[1])
