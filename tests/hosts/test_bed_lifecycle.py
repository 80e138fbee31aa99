"""Set-up and tear-down of the hosts bed: a bed built right after another was removed works,
a daemon that fails or hangs is named with the end of its log and nothing is left, and a killed
run's leftovers are cleared by the next bed. Each uses a bed of its own (prefix "nbt"), beside
the session's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.hosts.bed import NODES, BedError, HostBed
from tests.hosts.bed_net import Network
from tests.support.paths import pythonpath

PREFIX = "nbt"


def alive(process: psutil.Process) -> bool:
    """Running, and not a zombie (a killed runner's children wait for init to reap them)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def assert_gone(bed: HostBed, root: Path) -> None:
    assert bed.leftovers() == []
    assert not root.exists()
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"{PREFIX}-" not in names
    assert not list(Path("/etc/netns").glob(f"{PREFIX}-*"))


def test_set_up_after_tear_down(bed_ready: None) -> None:
    for _ in range(2):
        with HostBed(prefix=PREFIX) as bed:
            nodes = bed.run("login", ["srun", "-N2", "hostname"]).stdout.split()
            assert sorted(nodes) == list(NODES)
            done = bed.run("login", ["ssh", "node1", "hostname"])
            assert done.stdout.strip() == "node1", done.stderr
            root = bed.root
        assert_gone(bed, root)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["slurmd", "-D", "--no-such-option"], "slurmd-node1 exited with code 1 before idle"),
        (["sleep", "600"], "slurmd-node1 was not ready (idle in sinfo) within 2s"),
    ],
    ids=["exits", "hangs"],
)
def test_a_failed_daemon_is_named_and_nothing_is_left(
    bed_ready: None, monkeypatch: pytest.MonkeyPatch, argv: list[str], expected: str
) -> None:
    monkeypatch.setattr("tests.hosts.bed.slurmd_argv", lambda: argv)
    bed = HostBed(prefix=PREFIX, ready_timeout=2)
    with pytest.raises(BedError) as failed:
        bed.start()
    assert expected in str(failed.value)
    assert "slurmd-node1." in str(failed.value)  # the log it quotes
    assert_gone(bed, bed.root)


def test_a_killed_runs_leftovers_are_cleared(bed_ready: None) -> None:
    code = (
        "import sys, time\n"
        "from tests.hosts.bed import HostBed\n"
        f"bed = HostBed(prefix={PREFIX!r})\n"
        "bed.start()\n"
        "print(bed.root, flush=True)\n"
        "time.sleep(600)\n"
    )
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    runner = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert runner.stdout is not None
        old_root = Path(runner.stdout.readline().strip())
        assert old_root.is_dir()
    finally:
        runner.kill()  # no tear-down: its daemons run on in their namespaces
        runner.wait()
    stale = [psutil.Process(pid) for pid in Network(PREFIX).pids()]
    assert len(stale) >= 5  # munged, slurmctld, 2 sshd, 2 slurmd
    with HostBed(prefix=PREFIX) as bed:
        assert not old_root.exists()
        assert not [p for p in stale if alive(p)]
        assert bed.run("login", ["ssh", "node2", "hostname"]).stdout.strip() == "node2"
        root = bed.root
    assert_gone(bed, root)
