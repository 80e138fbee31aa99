"""The config panel and the launch dashboard in a real JupyterLab, driven by headless chromium."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from browser_helpers import open_notebook, write_notebook

pytestmark = pytest.mark.browser

DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
SETUP = """\
import time
from nbaccel import PartialState
from nbaccel.launch.events import report_metrics, report_progress
from nbaccel.widgets import ConfigPanel


def train(steps):
    state = PartialState()
    for step in range(steps):
        time.sleep(0.1)
        report_progress(step + 1, steps, desc="train")
        report_metrics({"loss": 1.0 / (step + 1)}, step=step)
    print(f"rank {state.process_index} done")
    return state.process_index


panel = ConfigPanel(function=train, args=(10,))
panel"""
# The second cell: a launch that keeps the cell busy; its dashboard's Stop must still act.
BLOCKING = """\
import os
from nbaccel import notebook_launcher


def sleeper():
    print("sleeping in pid", os.getpid(), flush=True)
    time.sleep(120)


notebook_launcher(sleeper, num_processes=2, cpu=True, dashboard=True)"""
_PID = re.compile(r"\[rank\d\]: sleeping in pid (\d+)")


def _notebook(root: Path) -> str:
    return write_notebook(root / "panel.ipynb", [("panel", SETUP), ("blocking", BLOCKING)])


def _shot(page: Any, locator: Any, artifacts: Path, name: str) -> Path:
    path = artifacts / name
    locator.screenshot(path=str(path))
    DOCS_IMG.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, DOCS_IMG / name)
    return path


@pytest.mark.timeout(200)
def test_panel_validates_launches_and_dashboard_shows_both_ranks_finished_and_stop_acts(
    lab: Any, browser: Any, artifacts: Path
) -> None:
    cores = os.cpu_count() or 1
    page = browser.new_page(viewport={"width": 1280, "height": 1700})
    page.set_default_timeout(30_000)
    try:
        open_notebook(page, lab.open_url(_notebook(lab.root)))
        page.click(".jp-Notebook .jp-Cell .cm-content")
        page.keyboard.press("Control+Enter")
        page.get_by_text("Hardware found").wait_for()  # the panel rendered
        panel = page.locator(".jp-OutputArea-output").first
        assert "nbaccel config" in panel.inner_text()
        assert "CPU" in panel.inner_text()

        processes = page.locator(".widget-inline-hbox", has_text="Processes").locator("input")
        processes.first.fill(str(cores + 62))
        processes.first.press("Enter")
        message = f"at most {cores}: this machine has {cores} CPU core"
        page.get_by_text(message).wait_for()  # the invalid value shows its message
        assert page.get_by_role("button", name="Launch", exact=True).is_disabled()
        _shot(page, panel, artifacts, "widgets-panel.png")

        processes.first.fill("2")
        processes.first.press("Enter")
        page.get_by_text(message).wait_for(state="detached")
        launch = page.get_by_role("button", name="Launch", exact=True)
        page.wait_for_function("b => !b.disabled", arg=launch.element_handle())
        launch.click()
        page.get_by_text("Finished: 2 ranks").first.wait_for(timeout=120_000)  # header and summary
        page.get_by_text("Summary").wait_for()
        board = page.locator(".widget-vbox", has_text="nbaccel launch").last
        text = board.inner_text()
        print(text)
        rows = [line for line in text.splitlines() if line.strip().startswith(("0\t", "1\t"))]
        assert len(rows) == 2 and all("finished" in row for row in rows), text
        assert "rank 0: finished" in text and "rank 1: finished" in text
        board.scroll_into_view_if_needed()
        _shot(page, board, artifacts, "widgets-dashboard.png")
        _stop_a_launch_that_blocks_the_cell(page, artifacts)
    except BaseException:
        page.screenshot(path=str(artifacts / "failure.png"), full_page=True)
        raise
    finally:
        page.close()


def _stop_a_launch_that_blocks_the_cell(page: Any, artifacts: Path) -> None:
    """Run ``notebook_launcher(..., dashboard=True)`` in the second cell, click its Where?
    (both ranks shown in their ``time.sleep`` line) and then its Stop while the cell is still
    busy: every rank stops and the cell ends with LaunchStopped."""
    cell = page.locator(".jp-Notebook .jp-Cell").nth(1)
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+Enter")
    deadline, pids = time.monotonic() + 60, []
    while len(pids) < 2 and time.monotonic() < deadline:  # both ranks print their pid
        time.sleep(0.2)
        pids = sorted({int(pid) for pid in _PID.findall(cell.inner_text())})
    assert len(pids) == 2 and all(psutil.pid_exists(pid) for pid in pids), cell.inner_text()
    table = cell.locator(".widget-html", has_text="GPU memory").first
    while table.inner_text().count("MiB") < 2 and time.monotonic() < deadline:
        time.sleep(0.2)  # the dashboard redraws (RSS too) while the launch blocks the cell
    assert table.inner_text().count("MiB") == 2, table.inner_text()
    where = cell.locator("button.widget-button", has_text="Where?")
    page.wait_for_function("b => !b.disabled", arg=where.element_handle())
    where.click()  # while the launch blocks the cell: every rank answers from its own thread
    found = cell.locator(".widget-html", has_text="Where every rank is").first
    found.wait_for(timeout=30_000)
    while found.inner_text().count("time.sleep(120)") < 2 and time.monotonic() < deadline + 30:
        time.sleep(0.2)
    assert found.inner_text().count("time.sleep(120)") == 2, found.inner_text()
    stop = cell.locator("button.widget-button[title='Stop']")  # its icon joins its name
    page.wait_for_function("b => !b.disabled", arg=stop.element_handle())
    clicked = time.monotonic()
    stop.click()
    cell.get_by_text("LaunchStopped").first.wait_for(timeout=30_000)
    took = time.monotonic() - clicked
    cell.get_by_text("Stopped: 2 ranks").first.wait_for()
    text = cell.inner_text()
    print(text)
    assert took < 15, f"the launch stopped {took:.1f}s after the click"
    assert text.count("stopped (Stop button)") >= 2, text
    board = cell.locator(".widget-vbox", has_text="nbaccel launch").last
    board.scroll_into_view_if_needed()
    _shot(page, board, artifacts, "widgets-dashboard-stopped.png")
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in pids), f"workers {pids} outlived the Stop click"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
