"""WorkerPool when ranks fail: an exception, a rank stuck in a collective, a timeout, an
interrupt, a rank killed. Never a hang; the pool says what it kept and what it lost."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import psutil
import pytest

from nbaccel import WorkerError, WorkerPool
from nbaccel.launch.events import PoolStateEvent, TaskEvent
from nbaccel.launch.parent.pool import PoolBrokenError, TaskTimeoutError

pytestmark = pytest.mark.multiprocess

STUCK = (
    "import torch, torch.distributed as dist\n"
    "if rank == 1:\n"
    "    raise KeyError('no such shard')\n"
    "t = torch.ones(1)\n"
    "dist.all_reduce(t)  # rank 0 waits here for rank 1\n"
)


@pytest.fixture(scope="module")
def events() -> list[object]:
    return []


@pytest.fixture(scope="module")
def pool(events: list[object]) -> Iterator[WorkerPool]:
    with WorkerPool(2, cpu=True, grace_period=1.5, on_event=events.append) as warm:
        yield warm


def _interrupt_self_after(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def test_a_rank_error_keeps_the_pool_and_every_namespace(pool: WorkerPool) -> None:
    pool.execute("kept = rank * 3")
    pids = [row["pid"] for row in pool.status()]
    with pytest.raises(ValueError, match="bad value on rank 1") as info:
        pool.execute("if rank == 1:\n    raise ValueError('bad value on rank 1')\n", label="In [4]")
    cause = info.value.__cause__
    assert isinstance(cause, WorkerError) and cause.rank == 1
    assert "<nbaccel cell In [4]>" in cause.remote_traceback
    assert "raise ValueError" in cause.remote_traceback
    assert "tasks.py" not in cause.remote_traceback  # the machinery's own frames are left out
    assert pool.pull("kept") == [0, 3]
    assert [row["pid"] for row in pool.status()] == pids


def test_ranks_stuck_after_a_peer_failed_are_named_and_the_group_restarts(
    pool: WorkerPool, events: list[object]
) -> None:
    pool.execute("lost = True")
    old = [row["pid"] for row in pool.status()]
    start = time.monotonic()
    with pytest.raises(KeyError, match="no such shard") as info:
        pool.execute(STUCK, label="In [5]")
    assert time.monotonic() - start < 60
    note = str(info.value.__cause__)  # shown in every traceback display
    assert "rank(s) [0] did not finish In [5] within grace_period=1.5s" in note
    assert "rank 0: In [5], line 5, in <module>: dist.all_reduce(t)" in note
    assert "Where every rank was:" in note and "all_reduce #1 float32[1]" in note
    assert "namespace was lost" in note
    assert isinstance(info.value.__cause__, WorkerError) and info.value.__cause__.rank == 1
    new = [row["pid"] for row in pool.status()]
    assert set(new).isdisjoint(old) and all(_gone(pid) for pid in old)
    with pytest.raises(NameError):
        pool.pull("lost")
    assert pool.execute("world_size") == [2, 2]  # the new group works
    states = [e.state for e in events if isinstance(e, PoolStateEvent)]
    assert "restarting" in states and states[-1] == "ready"


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_an_interrupt_raises_inside_the_task_on_every_rank_and_keeps_the_pool(
    pool: WorkerPool, events: list[object]
) -> None:
    pool.execute("import time\nkept = 'yes'")
    pids = [row["pid"] for row in pool.status()]
    _interrupt_self_after(1.0)
    with pytest.raises(KeyboardInterrupt, match="every namespace is kept"):
        pool.execute(
            "steps = 0\n"
            "try:\n"
            "    while True:\n"
            "        steps += 1\n"
            "        time.sleep(0.001)\n"
            "except KeyboardInterrupt:\n"
            "    caught = True\n"
            "    raise\n",
            label="In [6]",
        )
    assert pool.pull("caught") == [True, True]
    assert all(steps > 10 for steps in pool.pull("steps"))
    assert pool.pull("kept") == ["yes", "yes"]
    assert [row["pid"] for row in pool.status()] == pids
    last = [e for e in events if isinstance(e, TaskEvent) and e.label == "In [6]"][-2:]
    assert {e.state for e in last} == {"interrupted"}


def test_a_rank_that_ignores_the_interrupt_is_handled_as_stuck(pool: WorkerPool) -> None:
    pool.execute("import time")
    _interrupt_self_after(1.0)
    with pytest.raises(KeyboardInterrupt) as info:
        pool.execute(
            "try:\n"
            "    time.sleep(60)\n"
            "except KeyboardInterrupt:\n"
            "    if rank == 1:\n"
            "        while True:\n"
            "            pass\n",
            label="In [7]",
        )
    text = str(info.value)
    assert "rank(s) [1] did not finish In [7]" in text and "after the interrupt" in text
    assert "rank 1: In [7], line 5, in <module>" in text and "namespace was lost" in text
    assert pool.run(lambda: "up") == ["up", "up"]


def test_a_task_past_the_timeout_is_stopped_and_named() -> None:
    with WorkerPool(2, cpu=True, timeout=1.0) as short:
        with pytest.raises(TaskTimeoutError, match=r"rank\(s\) \[0, 1\] did not finish") as info:
            short.execute("import time\ntime.sleep(60)", label="In [8]")
        assert "timeout=1.0s" in str(info.value) and "time.sleep(60)" in str(info.value)
        assert short.execute("rank") == [0, 1]


def test_a_killed_rank_breaks_the_pool_until_restart(pool: WorkerPool) -> None:
    victim = pool.status()[1]["pid"]
    pool.execute("import time")
    threading.Timer(0.5, lambda: os.kill(victim, signal.SIGKILL)).start()
    with pytest.raises(WorkerError) as info:
        pool.execute("time.sleep(30)", label="In [9]")
    text = str(info.value)
    assert "rank 1" in text and "SIGKILL" in text and "pool.restart()" in text
    rows = pool.status()
    assert pool.state == "broken"
    assert [row["state"] for row in rows] == ["stopped", "dead"]
    assert rows[1]["pid"] == victim and "SIGKILL" in rows[1]["error"]
    assert not psutil.Process().children(recursive=True)  # nothing left behind
    with pytest.raises(PoolBrokenError, match=r"pool.restart\(\)"):
        pool.run(lambda: 1)
    pool.restart()
    assert pool.run(lambda: 1) == [1, 1]


def test_a_rank_killed_between_calls_is_noticed(pool: WorkerPool) -> None:
    victim = pool.status()[0]["pid"]
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pool.state != "broken" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [row["state"] for row in pool.status()] == ["dead", "stopped"]
    with pytest.raises(PoolBrokenError, match="rank 0 was killed by SIGKILL"):
        pool.execute("1")
    pool.restart()
    assert pool.execute("rank") == [0, 1]
