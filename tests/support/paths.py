"""The checkout's root, and the ``PYTHONPATH`` that lets a child process import from it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def pythonpath(*folders: str | Path, environ: Mapping[str, str] | None = None) -> str:
    """A ``PYTHONPATH`` for a child process: ``folders`` (a tier's own helpers), then the
    checkout (``tests.support`` and the nbaccel under test, installed or not), then the
    ``PYTHONPATH`` of ``environ`` (default: this process's environment)."""
    inherited = (os.environ if environ is None else environ).get("PYTHONPATH")
    return os.pathsep.join(filter(None, [*map(str, folders), str(REPO), inherited]))
