"""The hosts tier's bed (a login node and two compute nodes with real sshd and real SLURM):
built once per session, removed at the end, and checked to have left nothing behind."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosts.bed import BedError, HostBed
from tests.support.beds import namespaces_refused

HERE = Path(__file__).resolve().parent
INSTALL = HERE / "install.sh"
PROGRAMS = ("sshd", "ssh", "ssh-keygen", "munged", "mungekey", "slurmctld", "slurmd", "srun")
_SBIN = "/usr/sbin:/usr/bin:/sbin:/bin"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "hosts: a login node and compute nodes with real sshd and SLURM (needs root)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:  # every test of this folder, whoever writes it
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.hosts)


def _unavailable() -> str | None:
    """Why this machine cannot build the bed at all (a skip), or None."""
    return namespaces_refused(
        "the hosts bed", ".venv/bin/python -m pytest tests/hosts -m hosts", "nbh-probe"
    )


def _missing() -> list[str]:
    return [name for name in PROGRAMS if not shutil.which(name, path=_SBIN)]


@pytest.fixture(scope="session")
def bed_ready() -> None:
    """Skip where no bed can be built; install its packages where they are missing."""
    reason = _unavailable()
    if reason:
        pytest.skip(reason)
    if not _missing():
        return
    done = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=900)
    missing = _missing()
    if done.returncode != 0 or missing:
        pytest.fail(
            f"the hosts bed needs {', '.join(missing) or 'its packages'}: `bash {INSTALL}` "
            f"(as root) exited with {done.returncode}\n{done.stderr[-2000:]}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def host_bed(bed_ready: None) -> Iterator[HostBed]:
    """The bed, shared by the session's tests; gone (checked) after it."""
    bed = HostBed()
    try:
        bed.start()
    except BedError as exc:
        pytest.fail(f"the hosts bed did not start: {exc}", pytrace=False)
    try:
        yield bed
    finally:
        bed.close()
    left = bed.leftovers()
    assert not left, f"the hosts bed left these behind: {left}"
