"""A ``%%nbaccel`` cell in a real JupyterLab, driven by headless chromium: what the page shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from browser_helpers import open_notebook, write_notebook

pytestmark = pytest.mark.browser

CELLS = (
    ("start", "%load_ext nbaccel\n%nbaccel start -n 2 --cpu"),
    ("ranks", '%%nbaccel\nprint("hello from rank", rank, "of", world_size)\nrank * 10 + 2'),
    ("same", "%%nbaccel\n6 * 7"),
    ("stop", "%nbaccel stop"),
)


def _notebook(root: Path) -> str:
    return write_notebook(root / "pool.ipynb", list(CELLS))


def _run(page: Any, index: int, done: str, timeout: float = 60_000) -> Any:
    """Run cell ``index`` (Ctrl+Enter) and wait until its output shows ``done``."""
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+Enter")
    cell.locator(".jp-OutputArea").get_by_text(done).first.wait_for(timeout=timeout)
    return cell


@pytest.mark.timeout(200)
def test_nbaccel_cell_shows_prefixed_lines_and_out_values(
    lab: Any, browser: Any, artifacts: Path
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 1200})
    page.set_default_timeout(30_000)
    try:
        open_notebook(page, lab.open_url(_notebook(lab.root)))
        _run(page, 0, "pool of 2 processes is ready", timeout=120_000)

        cell = _run(page, 1, "[rank1]: 12")
        lines = cell.locator(".jp-OutputArea-output").all_inner_texts()
        text = "\n".join(lines)
        assert "[rank0]: hello from rank 0 of 2" in text, text
        assert "[rank1]: hello from rank 1 of 2" in text, text
        result = cell.locator(".jp-OutputArea-executeResult")
        assert result.count() == 1, text
        assert result.inner_text().split() == ["[2]:", "[rank0]:", "2", "[rank1]:", "12"], text

        cell = _run(page, 2, "42")
        result = cell.locator(".jp-OutputArea-executeResult")
        assert result.inner_text().split() == ["[3]:", "42"], result.inner_text()
        page.locator(".jp-Notebook .jp-Cell").nth(1).screenshot(path=str(artifacts / "pool.png"))
        _run(page, 3, "the pool is stopped")
    except BaseException:
        page.screenshot(path=str(artifacts / "pool-failure.png"), full_page=True)
        raise
    finally:
        page.close()
