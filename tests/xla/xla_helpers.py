"""Helpers of the xla tier: run code in a fresh interpreter of the tier's environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_script(code: str, env_changes: dict[str, str | None], timeout: int = 240) -> str:
    """Run ``code`` in a fresh interpreter of this environment; return its stdout (it must
    exit 0). A fresh process is needed where torch_xla must not be imported yet."""
    env = dict(os.environ)
    for name in ("PJRT_DEVICE", "TPU_NAME", "COLAB_TPU_ADDR", "TPU_ACCELERATOR_TYPE"):
        env.pop(name, None)
    for name, value in env_changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    return proc.stdout
