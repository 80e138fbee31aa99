"""Fault tests: every test gets its own temporary directory (TMPDIR and tempfile.tempdir), so
that "no temporary file left behind" is judged on a directory no other job writes to.

torch itself creates its compile cache (``torchinductor_<user>``) in the temporary directory
when ``torch._dynamo`` is first imported in a process (AdamW does); that cache is torch's and
meant to persist, so it is pointed elsewhere with torch's own ``TORCHINDUCTOR_CACHE_DIR``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def private_tempdir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """A fresh, empty directory as this process's (and its workers') temporary directory."""
    directory = tmp_path_factory.mktemp("tmpdir")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "inductor"))
    monkeypatch.setenv("TMPDIR", str(directory))
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    yield directory


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Callable[..., None]:
    """``record(seconds=..., ...)``: append measured figures for docs/reliability.md to the
    file named by ``NBACCEL_FAULT_REPORT`` (nothing when it is unset)."""

    def write(**figures: Any) -> None:
        target = os.environ.get("NBACCEL_FAULT_REPORT")
        if target:
            with open(target, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"test": request.node.nodeid, **figures}) + "\n")

    return write


@pytest.fixture(scope="session", autouse=True)
def _torch_store_warmed_up() -> None:
    """The first TCPStore server of a process makes torch open a pipe pair that lives as long
    as the process (torch's, created once, not one per launch). Create it before any test
    takes its "before" snapshot of the descriptors."""
    import torch.distributed as dist

    store = dist.TCPStore(
        "127.0.0.1", 0, world_size=1, is_master=True, wait_for_workers=False, timeout=timedelta(5)
    )
    del store
