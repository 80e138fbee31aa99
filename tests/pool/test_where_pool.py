"""WorkerPool.where() and the pool's watch over its ranks: where every rank is, also while a
call runs; a stalled or diverged collective named and, with on_stall="raise", the group
restarted (real gloo ranks, fork and spawn)."""

from __future__ import annotations

import faulthandler
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from nbaccel import StallError, WorkerError, WorkerPool

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(180)]

STALL_S = 2.0
REPORTED_WITHIN_S = STALL_S + 5.0  # the watch asks about once a second; room for a loaded host
HEAD = "import time, torch, torch.distributed as dist\nt = torch.ones(4)\n"


@pytest.fixture(scope="module", params=["fork", "spawn"])
def pool(request: pytest.FixtureRequest) -> Iterator[WorkerPool]:
    with WorkerPool(
        2,
        cpu=True,
        start_method=request.param,
        stall_timeout=STALL_S,
        on_stall="raise",
        grace_period=3.0,
    ) as warm:
        yield warm


def _row(rows: list[dict[str, Any]], rank: int) -> dict[str, Any]:
    (row,) = [row for row in rows if row["rank"] == rank]
    return row


def _stall(pool: WorkerPool, source: str, label: str) -> StallError:
    pids = [row["pid"] for row in pool.status()]
    with pytest.raises(StallError) as info:
        pool.execute(source, label=label)
    assert "The pool restarted its process group" in str(info.value)
    assert not set(pids) & {row["pid"] for row in pool.status()}  # a new group
    assert pool.execute("world_size") == [2, 2]  # and it works
    return info.value


def test_an_idle_pool_says_every_rank_is_idle(pool: WorkerPool) -> None:
    pool.execute("x = 1", label="In [1]")
    table = pool.where()
    assert [row["state"] for row in table] == ["idle", "idle"]
    assert [row["task"] for row in table] == ["In [1]", "In [1]"]
    assert [row["pid"] for row in table] == [row["pid"] for row in pool.status()]
    assert "(after In [1])" in str(table)


def test_where_answers_from_another_thread_while_a_cell_sleeps(pool: WorkerPool) -> None:
    found: list[Any] = []

    def ask() -> None:
        time.sleep(2.0)
        found.append(pool.where())

    asker = threading.Thread(target=ask)
    asker.start()
    source = "import time\nif rank == 1:\n    time.sleep(4)\nelse:\n    time.sleep(4.5)\n"
    pool.execute(source, label="In [w]")
    asker.join()
    (table,) = found
    assert _row(table, 1)["where"] == "In [w], line 3" and _row(table, 1)["state"] == "running"
    assert _row(table, 1)["source"] == "time.sleep(4)" and _row(table, 0)["where"] == (
        "In [w], line 5"
    )
    assert _row(table, 0)["file"] == "<nbaccel cell In [w]>" and _row(table, 0)["line"] == 5


def test_a_rank_that_skips_the_collective_is_named_idle(pool: WorkerPool) -> None:
    error = _stall(pool, HEAD + "if rank == 0:\n    dist.all_reduce(t)\n", "In [a]")
    text = str(error)
    assert error.kind == "stall", text
    assert "in all_reduce (#1, In [a], line 4), and rank 1 never joined it: rank 1 is idle" in text
    waiting = _row(error.where, 0)
    assert STALL_S <= waiting["seconds"] <= REPORTED_WITHIN_S
    assert waiting["call_site"] == "In [a], line 4" and waiting["shapes"] == [[4]]


def test_ranks_in_different_collectives_are_named_at_once(pool: WorkerPool) -> None:
    source = HEAD + (
        "if rank == 1:\n"
        "    dist.all_gather([torch.zeros(4), torch.zeros(4)], t)\n"
        "else:\n"
        "    dist.all_reduce(t)\n"
    )
    error = _stall(pool, source, "In [b]")
    text = str(error)
    assert error.kind == "divergence", text
    assert "all_gather (#1, In [b], line 4)" in text and "all_reduce (#1, In [b], line 6)" in text
    assert max(row["seconds"] for row in error.where) <= REPORTED_WITHIN_S


def test_a_rank_spinning_in_python_is_named_with_its_line(pool: WorkerPool) -> None:
    source = HEAD + "if rank == 1:\n    while True:\n        pass\ndist.barrier()\n"
    error = _stall(pool, source, "In [c]")
    text = str(error)
    assert "in barrier (#1, In [c], line 6), and rank 1 never joined it" in text, text
    assert "rank 1 is at In [c], line 4, in <module>: while True:" in text, text


def test_a_rank_in_a_long_sleep_is_named_with_its_frame(pool: WorkerPool) -> None:
    source = HEAD + "if rank == 1:\n    time.sleep(1e6)\ndist.all_reduce(t)\n"
    error = _stall(pool, source, "In [d]")
    assert "rank 1 is at In [d], line 4, in <module>: time.sleep(1e6)" in str(error)
    assert _row(error.where, 1)["source"] == "time.sleep(1e6)"


@pytest.fixture
def quiet_abort() -> Iterator[None]:
    """gloo aborts a forked rank in this test: the crash report that pytest's faulthandler,
    inherited by the fork, would print is no output of the test's."""
    enabled = faulthandler.is_enabled()
    faulthandler.disable()
    yield
    if enabled:
        faulthandler.enable(file=sys.__stderr__)


@pytest.mark.usefixtures("quiet_abort")
def test_tensors_of_other_shapes_are_named_with_both_shapes() -> None:
    source = HEAD + (
        "if rank == 1:\n"
        "    time.sleep(3)\n"
        "mine = torch.ones(2 + rank)\n"
        "dist.all_gather([torch.zeros(2 + rank), torch.zeros(2 + rank)], mine)\n"
    )
    with WorkerPool(2, cpu=True, stall_timeout=60.0, grace_period=3.0) as pool:
        with pytest.raises(WorkerError) as info:  # gloo aborts a rank: the pool breaks
            pool.execute(source, label="In [e]")
        text = str(info.value)
        assert "all_gather (#1)" in text, text
        assert "rank 0 sends float32[2] (In [e], line 6)" in text, text
        assert "rank 1 sends float32[3] (In [e], line 6)" in text, text
        assert pool.state == "broken"


def test_a_stall_that_ends_is_reported_and_the_call_goes_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with WorkerPool(2, cpu=True, stall_timeout=STALL_S) as warn:  # on_stall="warn"
        source = HEAD + f"if rank == 1:\n    time.sleep({STALL_S + 4})\ndist.all_reduce(t)\nrank\n"
        assert warn.execute(source, label="In [f]") == [0, 1]
    err = capsys.readouterr().err
    assert "nbaccel: a collective stalled: rank 0 has waited" in err, err
    assert "rank 1 is at In [f], line 4, in <module>: time.sleep(6.0)" in err, err
    assert err.count("a collective stalled") == 1 and "The run goes on" in err
