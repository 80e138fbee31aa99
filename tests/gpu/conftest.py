"""The GPU tier: every test here needs CUDA and is skipped (still collected) without it.

CUDA is detected without initialising it in the test process (each check runs in a fresh
interpreter or a real Jupyter kernel of its own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbaccel.environment import cuda_device_count


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if cuda_device_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs CUDA: this machine has no GPU")
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)
