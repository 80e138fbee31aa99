"""Shared fixtures: a fresh nbaccel state and a clean launch environment for every test."""

from __future__ import annotations

import os
import re
import site
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nbaccel.testing import reset_state

# Variables that tell nbaccel (or torch) how this process was launched. A test process must not
# inherit them from a shell that happens to run under a launcher.
LAUNCH_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "NODE_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "NBACCEL_LAUNCHED",
    "NBACCEL_RESTART_COUNT",
    "NBACCEL_FORK_LAUNCHED",
    "NBACCEL_USE_CPU",
    "NBACCEL_MIXED_PRECISION",
    "NBACCEL_PRECISION_WARNED",
    "NBACCEL_DEBUG_MODE",
    "ACCELERATE_DEBUG_MODE",
    "ACCELERATE_MIXED_PRECISION",
    "ACCELERATE_USE_CPU",
    "ACCELERATE_TORCH_DEVICE",
    "NBACCEL_TORCH_DEVICE",
    "NBACCEL_FSDP_CONFIG",
    "ACCELERATE_USE_FSDP",
    "PJRT_DEVICE",
    "TPU_NAME",
    "COLAB_TPU_ADDR",
    "TPU_ACCELERATOR_TYPE",
)


def find_free_port() -> int:
    """A TCP port that nothing listens on right now (bind port 0 and let the OS pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# Variables that code under test sets in its own process (Accelerate's Accelerator sets
# ACCELERATE_USE_FSDP=true and FSDP_* for an fsdp_plugin, as nbaccel's launcher does for its
# ranks): a test that leaves them behind would turn FSDP on for the ranks of a later one.
_LEFT_BY_CODE = re.compile(r"^(ACCELERATE_USE_FSDP|FSDP_[A-Z_]+)$")


@pytest.fixture(autouse=True)
def _fresh_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run each test without launch variables and forget the nbaccel state afterwards; the
    FSDP variables a test's code set are removed again."""
    for name in LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    before = {k: v for k, v in os.environ.items() if _LEFT_BY_CODE.match(k)}
    reset_state()
    yield
    reset_state()
    for name in [k for k in os.environ if _LEFT_BY_CODE.match(k)]:
        if name in before:
            os.environ[name] = before[name]
        else:
            del os.environ[name]


@pytest.fixture(scope="session")
def free_port() -> Callable[[], int]:
    """A function that returns a free TCP port on 127.0.0.1."""
    return find_free_port


def clean_environ(**extra: str) -> dict[str, str]:
    """A copy of ``os.environ`` without launch variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def subprocess_environ() -> Callable[..., dict[str, str]]:
    """A function building a child-process environment free of launch variables."""
    return clean_environ


def _site_dirs() -> list[str]:
    """Where this interpreter finds installed packages, in its own order, whatever made it
    (the system's Python, a virtual environment, conda)."""
    known = {*site.getsitepackages()}
    if site.ENABLE_USER_SITE:
        known.add(site.getusersitepackages())
    return [entry for entry in sys.path if entry in known and os.path.isdir(entry)]


@pytest.fixture(scope="session")
def venv_seeing_these_packages() -> Callable[[Path], Path]:
    """Make a fresh virtual environment at a path that sees this interpreter's packages; the
    venv's python is returned.

    It sees them through a ``.pth`` file that adds this interpreter's site directories, so it
    works the same whether the tests run with the system's Python, inside a virtual
    environment (as CI runs them) or in conda: ``venv --system-site-packages`` would see the
    base interpreter's packages instead of the running venv's. The venv's own old setuptools
    is removed so that the installed one (which torch's metadata asks for) is seen.
    """

    def make(path: Path) -> Path:
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        python = path / "bin" / "python"
        purelib = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        lines = [f"import site; site.addsitedir({entry!r})\n" for entry in _site_dirs()]
        Path(purelib, "_outer_environment.pth").write_text("".join(lines), encoding="utf-8")
        subprocess.run(
            [str(python), "-m", "pip", "uninstall", "-q", "-y", "setuptools"], check=True
        )
        return python

    return make
