"""What the browser tests do in every JupyterLab page they open."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["open_notebook", "write_notebook"]


def write_notebook(path: Path, cells: list[tuple[str, str]]) -> str:
    """Write a notebook of code cells (``(cell id, source)``) for the python3 kernel at
    ``path``; return its file name."""
    nb = {
        "cells": [
            {"cell_type": "code", "id": name, "execution_count": None, "metadata": {},
             "outputs": [], "source": source}
            for name, source in cells
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }  # fmt: skip
    path.write_text(json.dumps(nb))
    return path.name


def open_notebook(page: Any, url: str) -> None:
    """Open the notebook at ``url`` and wait until its kernel is idle (answering JupyterLab's
    kernel choice dialog when it shows one)."""
    page.goto(url)
    page.wait_for_selector(".jp-Notebook .jp-Cell .cm-content")
    select = page.locator(".jp-Dialog").get_by_role("button", name="Select")
    try:  # JupyterLab may ask which kernel to start
        select.wait_for(timeout=10_000)
        select.click()
    except Exception:
        pass
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle'] >> visible=true")
