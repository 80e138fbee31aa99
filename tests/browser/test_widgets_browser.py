"""The config panel and the launch dashboard in a real JupyterLab, driven by headless chromium."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

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


def _notebook(root: Path) -> str:
    cell = {"cell_type": "code", "id": "panel", "execution_count": None, "metadata": {},
            "outputs": [], "source": SETUP}  # fmt: skip
    nb = {
        "cells": [cell],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }  # fmt: skip
    (root / "panel.ipynb").write_text(json.dumps(nb))
    return "panel.ipynb"


def _shot(page: Any, locator: Any, artifacts: Path, name: str) -> Path:
    path = artifacts / name
    locator.screenshot(path=str(path))
    DOCS_IMG.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, DOCS_IMG / name)
    return path


@pytest.mark.timeout(200)
def test_panel_validates_launches_and_dashboard_shows_both_ranks_finished(
    lab: Any, browser: Any, artifacts: Path
) -> None:
    cores = os.cpu_count() or 1
    page = browser.new_page(viewport={"width": 1280, "height": 1700})
    page.set_default_timeout(30_000)
    try:
        page.goto(lab.open_url(_notebook(lab.root)))
        page.wait_for_selector(".jp-Notebook .jp-Cell .cm-content")
        select = page.locator(".jp-Dialog").get_by_role("button", name="Select")
        try:  # JupyterLab may ask which kernel to start
            select.wait_for(timeout=10_000)
            select.click()
        except Exception:
            pass
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']")
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
    except BaseException:
        page.screenshot(path=str(artifacts / "failure.png"), full_page=True)
        raise
    finally:
        page.close()
