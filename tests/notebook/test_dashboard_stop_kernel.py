"""The dashboard's Stop button while ``notebook_launcher(..., dashboard=True)`` blocks the cell.

A real kernel runs the launch in a cell; the test plays the front end: it reads the Stop
button's comm id from the cell's iopub ``comm_open`` messages and sends the click as the
browser's widget manager does (a ``comm_msg`` on the shell channel) while the cell still runs.
The cell must end promptly with ``LaunchStopped``, every worker gone; a cell queued behind the
launch is aborted as after any error, and the kernel then runs cells and launches as before.
The cells' protocol messages (busy, execute_input, error, idle) must be exactly those of the same
cells without nbaccel: a plain cell that fails, or runs as long, with the same cells queued. The
tier runs on the newest ipykernel and, in the "colab" tier, on Colab's ipykernel 6 (a plain
install: nothing beyond the kernel is needed for Stop).
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")
pytest.importorskip("ipywidgets")

from tests.support.kernel import (
    Cell,
    Kernel,
    click_button,
    pids_alive,
    running_kernel,
    wait_gone,
    widget_buttons,
)

pytestmark = pytest.mark.notebook

_SETUP = """
import os, time
from nbaccel import notebook_launcher

def long_running():
    print("pid", os.getpid(), flush=True)
    for _ in range(600):
        time.sleep(0.1)
    return "not stopped"
"""
_PID_LINE = re.compile(r"^\[rank(\d)\]: pid (\d+)$", re.MULTILINE)


class _Running(Exception):
    """Both workers printed their pid and the Stop button is known."""


def _start(kernel: Kernel) -> tuple[Cell, list[int], str]:
    cell = kernel.submit("notebook_launcher(long_running, num_processes=2, dashboard=True)")
    buttons: dict[str, str] = {}
    pids: dict[int, int] = {}

    def until_running(message: dict[str, Any], running: Cell) -> None:
        widget_buttons(message, buttons)
        pids.update({int(r): int(p) for r, p in _PID_LINE.findall(running.stdout)})
        if len(pids) == 2 and "Stop" in buttons:
            raise _Running

    try:
        kernel.collect(cell, timeout=90, on_message=until_running)
    except _Running:
        return cell, [pids[0], pids[1]], buttons["Stop"]
    raise AssertionError(f"the launch never showed both workers running:\n{cell.describe()}")


def _queued_traces(kernel: Kernel, first: str, queued: list[str]) -> list[list[str]]:
    """The traces of ``first`` and of the cells queued behind it, as the kernel sends them."""
    cells = [kernel.submit(first), *(kernel.submit(code) for code in queued)]
    for cell in cells:
        kernel.collect(cell, timeout=60)
    kernel.ok("pass")  # every message of the cells above came before this cell's
    return [cell.trace for cell in cells]


@pytest.mark.timeout(240)
def test_stop_click_stops_a_launch_that_blocks_the_kernel() -> None:
    with running_kernel() as kernel:
        kernel.ok(_SETUP)
        # without nbaccel: a cell fails while a cell waits behind it
        plain = _queued_traces(kernel, "time.sleep(1.5); raise KeyboardInterrupt", ["print(1)"])
        cell, pids, stop_id = _start(kernel)
        assert not cell.idle and pids_alive(pids) == pids
        queued = kernel.submit("print('queued cell ran')")  # e.g. "Run all": waits its turn
        time.sleep(0.3)
        clicked = time.monotonic()
        click_button(kernel, stop_id)
        kernel.collect(cell, timeout=30)
        assert cell.status == "error" and cell.ename == "LaunchStopped", cell.describe()
        assert cell.finished is not None and cell.finished - clicked < 8.0, (
            f"the launch took {cell.finished - clicked:.1f}s to stop after the click"
        )
        assert wait_gone(pids, 5.0) == [], f"workers {pids} outlived the Stop click"
        assert "not stopped" not in cell.stdout
        # a cell queued behind the stopped launch is aborted, as after any failing cell
        kernel.collect(queued, timeout=30)
        assert queued.status == "aborted", queued.describe()
        assert "queued cell ran" not in queued.stdout
        kernel.ok("pass")
        # the running cell went idle once, at its end; the queued cell ended as without nbaccel
        assert [cell.trace, queued.trace] == plain, (cell.trace, queued.trace, plain)
        # the kernel is healthy: cells run, and a new launch (no dashboard) works
        assert kernel.value("1 + 1") == "2"
        again = kernel.ok("print(notebook_launcher(lambda: 7, num_processes=2))", timeout=90)
        assert "[7, 7]" in again.stdout, again.describe()


@pytest.mark.timeout(240)
def test_a_cell_queued_behind_a_finished_dashboard_launch_still_runs_in_order() -> None:
    """Messages the kernel would have read later are given back to it, in order."""
    with running_kernel() as kernel:
        kernel.ok(_SETUP)
        plain = _queued_traces(kernel, "time.sleep(2)", ["print(2)", "print(3)"])
        cell = kernel.submit(
            "r = notebook_launcher(lambda: time.sleep(2) or 'done', num_processes=2, "
            "dashboard=True)\nprint('first', r)"
        )
        second = kernel.submit("print('second')")
        third = kernel.submit("print('third')")
        kernel.collect(cell, timeout=90)
        assert cell.status == "ok" and "first ['done', 'done']" in cell.stdout, cell.describe()
        for queued, text in ((second, "second"), (third, "third")):
            kernel.collect(queued, timeout=30)
            assert queued.status == "ok" and queued.stdout.strip() == text, queued.describe()
        assert cell.execution_count is not None and second.execution_count is not None
        assert third.execution_count == second.execution_count + 1 == cell.execution_count + 2
        kernel.ok("pass")
        assert [cell.trace, second.trace, third.trace] == plain
