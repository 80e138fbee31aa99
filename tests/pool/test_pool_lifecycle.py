"""WorkerPool's lifecycle: shutdown leaves nothing behind, twenty cycles leak nothing, the CUDA
guard and spawn, a dropped pool, and the dashboard seam."""

from __future__ import annotations

import gc
import io
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import torch

from nbaccel import WorkerPool
from nbaccel.launch.guard import CudaInitializedError
from nbaccel.launch.parent.pool import PoolClosedError
from nbaccel.widgets import TextDashboard

pytestmark = pytest.mark.multiprocess


@dataclass(frozen=True)
class Snapshot:
    """What this process holds that a pool must give back."""

    fds: frozenset[str]
    threads: frozenset[str]
    children: frozenset[int]
    listening: frozenset[int]
    temp: frozenset[str]

    @classmethod
    def take(cls) -> Snapshot:
        return cls(
            fds=frozenset(os.listdir("/proc/self/fd")),
            threads=frozenset(f"{t.name}:{t.ident}" for t in threading.enumerate()),
            children=frozenset(p.pid for p in psutil.Process().children(recursive=True)),
            listening=_listening_ports(),
            temp=frozenset(os.listdir(tempfile.gettempdir())),
        )


def _listening_ports() -> frozenset[int]:
    """Ports this process listens on, read from /proc/net/tcp{,6} by the sockets' inodes."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as handle:
            for line in handle.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return frozenset(ports)


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    yield tmp_path


def _settled(before: Snapshot, timeout: float = 10.0) -> Snapshot:
    deadline = time.monotonic() + timeout
    after = Snapshot.take()
    while after != before and time.monotonic() < deadline:
        time.sleep(0.1)
        gc.collect()
        after = Snapshot.take()
    return after


def test_shutdown_leaves_nothing_and_twenty_cycles_leak_nothing(private_tmp: Path) -> None:
    with WorkerPool(2, cpu=True) as warm:  # torch's first store opens what it keeps for good
        warm.run(lambda: 1)
    before = _settled(Snapshot.take(), 1.0)
    pool = WorkerPool(2, cpu=True)
    assert pool.execute("x = rank\nx") == [0, 1]
    during = Snapshot.take()
    assert len(during.children) == 2 and during.listening - before.listening
    pool.shutdown()
    pool.shutdown()  # idempotent
    assert _settled(before) == before
    for cycle in range(20):
        with WorkerPool(2, cpu=True) as again:
            assert again.run(lambda c=cycle: c) == [cycle, cycle]
    assert _settled(before) == before
    with pytest.raises(PoolClosedError, match="shut down"):
        pool.run(lambda: 1)
    assert [row["state"] for row in pool.status()] == ["closed", "closed"]


def test_a_pool_dropped_without_shutdown_stops_its_workers() -> None:
    pool = WorkerPool(2, cpu=True)
    pids = [row["pid"] for row in pool.status()]
    del pool
    gc.collect()
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(psutil.pid_exists(pid) for pid in pids)


def test_fork_is_refused_after_cuda_init_and_spawn_runs_cells_and_functions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # no GPU here: stand-in
    before = psutil.Process().children(recursive=True)
    with pytest.raises(CudaInitializedError, match="spawn"):
        WorkerPool(2, cpu=True, start_method="fork")
    assert psutil.Process().children(recursive=True) == before
    scale = 3

    def scaled(value: int) -> int:  # a closure: travels by value with cloudpickle
        return value * scale

    with WorkerPool(2, cpu=True) as pool:  # "auto" chooses spawn now
        assert pool.method == "spawn"
        assert pool.run(scaled, 5) == [15, 15]
        assert pool.execute("import os\nkept = os.getpid()\nrank") == [0, 1]
        assert pool.pull("kept") == [row["pid"] for row in pool.status()]


def test_status_and_the_dashboard_show_each_rank_state_and_current_cell() -> None:
    board = TextDashboard(io.StringIO())
    seen: list[str] = []
    with WorkerPool(2, cpu=True, dashboard=board) as pool:
        rows: list[dict[str, object]] = []

        def look() -> None:
            seen.append(board.summary())
            rows.extend(pool.status())

        timer = threading.Timer(0.7, look)
        timer.start()
        pool.execute("import time\ntime.sleep(1.5)", label="In [3]")
        timer.join()
        assert [(row["state"], row["cell"]) for row in rows] == [("running", "In [3]")] * 2
        board.sample_memory()
        idle = board.summary()
    assert "rank 0: running (In [3])" in seen[0] and "rank 1: running (In [3])" in seen[0]
    assert "rank 0: idle" in idle and "RSS -" not in idle
    assert "Finished" in board.summary()


def test_a_start_past_start_timeout_says_so_and_leaves_nothing() -> None:
    before = psutil.Process().children(recursive=True)
    with pytest.raises(TimeoutError, match="did not join the process group within"):
        WorkerPool(2, cpu=True, start_timeout=0.01)
    assert psutil.Process().children(recursive=True) == before


def test_a_pool_stays_on_this_machine_whatever_hosts_the_config_file_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file's ``hosts`` is notebook_launcher's default, never a pool's: a pool started as
    always runs here (docs/multihost.md); ``hosts=`` as an argument is how a pool leaves."""
    config = tmp_path / "cfg.yaml"
    config.write_text("hosts:\n- node-that-does-not-exist\nhosts_python: /nowhere/python\n")
    monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(config))
    pool = WorkerPool(1, cpu=True)
    try:
        assert pool.hosts is None
        assert pool.run(os.getpid) != [os.getpid()]  # a rank of this machine answered
    finally:
        pool.shutdown()
