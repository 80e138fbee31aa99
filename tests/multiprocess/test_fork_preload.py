"""``import nbaccel`` is lazy; a fork launch loads the Accelerator in the notebook once before
its ranks fork (``launch/parent/preloads.py``), so no rank imports it again at every launch,
and a spawn launch loads nothing in the notebook. Each check runs in a fresh interpreter, the
notebook, that imported only ``notebook_launcher``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nbaccel.launch.parent.preloads import register_fork_preload
from tests.support.paths import pythonpath

pytestmark = pytest.mark.multiprocess

NOTEBOOK = """
import sys
from nbaccel import notebook_launcher

HEAVY = "nbaccel.training.accelerator"

def loaded_in_rank():
    import sys
    return HEAVY in sys.modules

print("BEFORE", HEAVY in sys.modules)
print("RANKS", notebook_launcher(loaded_in_rank, num_processes=2, start_method="{method}"))
print("AFTER", HEAVY in sys.modules)
"""


@pytest.mark.parametrize(
    ("method", "ranks", "after"),
    [("fork", "[True, True]", "True"), ("spawn", "[False, False]", "False")],
)
def test_a_fork_launch_loads_the_accelerator_once_in_the_notebook(
    method: str, ranks: str, after: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", NOTEBOOK.replace("{method}", method)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": pythonpath()},
    )
    assert done.returncode == 0, done.stderr
    assert "BEFORE False" in done.stdout, done.stdout
    assert f"RANKS {ranks}" in done.stdout, done.stdout
    assert f"AFTER {after}" in done.stdout, done.stdout


def test_a_preload_must_be_callable() -> None:
    with pytest.raises(TypeError, match="a fork preload must be callable, got str"):
        register_fork_preload("nbaccel.training")  # type: ignore[arg-type]
