"""``hosts="ray"`` where Ray is not installed: an ImportError naming the extra that installs it,
at once, before anything starts (a fresh interpreter in which ``import ray`` fails)."""

from __future__ import annotations

import subprocess
import sys
import time

CODE = """
import sys
sys.modules["ray"] = None  # `import ray` now raises ImportError, as where it is not installed
from nbaccel import WorkerPool, notebook_launcher
for start in (lambda: notebook_launcher(print, hosts="ray"), lambda: WorkerPool(hosts="ray")):
    try:
        start()
    except ImportError as exc:
        print("REFUSED", exc)
"""


def test_a_launch_and_a_pool_without_ray_name_the_extra() -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120, check=True
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("REFUSED")]
    assert len(lines) == 2, done.stdout + done.stderr
    for line in lines:
        assert 'hosts="ray" runs the ranks on the nodes of a Ray cluster' in line, line
        assert 'pip install "nbaccel[ray]"' in line, line
    assert time.monotonic() - started < 60
