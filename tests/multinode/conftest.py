"""The shared two-machine bed: built once per session, removed (and checked) at the end."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from bed import HERE, Bed, Machine

from tests.support.paths import pythonpath

# Variables that would tell nbaccel it is already inside a launch.
_DROPPED = re.compile(
    r"^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|NODE_RANK|MASTER_ADDR|"
    r"MASTER_PORT|TORCHELASTIC_.*|NBACCEL_.*|ACCELERATE_.*|GLOO_SOCKET_IFNAME)$"
)
PRELUDE = """
import json, os, sys
import node_functions as nf
from nbaccel import notebook_launcher
"""


@pytest.fixture(scope="session")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """Two namespaces, two links, two disks; gone (checked) after the session."""
    made = Bed(tmp_path_factory.mktemp("machines"))
    made.create()
    try:
        yield made
    finally:
        made.destroy()
    left = made.leftovers()
    assert not left, f"the bed left these behind: {left}"


@pytest.fixture(scope="session")
def machines(bed: Bed) -> list[Machine]:
    """A Jupyter kernel in each namespace, shared by the tier's tests."""
    env = {k: v for k, v in os.environ.items() if not _DROPPED.match(k)}
    # the kernels import node_functions from this folder and tests.support from the checkout
    env["PYTHONPATH"] = pythonpath(HERE)
    started = [Machine(bed, index, env) for index in (0, 1)]
    for machine in started:
        answer = machine.run(PRELUDE, timeout=120)
        assert answer["status"] == "ok", answer
    return started


@pytest.fixture
def flags(tmp_path: Path) -> Path:
    """A directory both machines' ranks and the test use to signal each other."""
    tmp_path.chmod(0o777)
    return tmp_path
