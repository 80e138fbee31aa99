"""WorkerPool's calls on warm ranks: results, namespaces, push/pull, status, output, state."""

from __future__ import annotations

import os
import statistics
import time

import psutil
import pytest

from nbaccel import WorkerPool
from nbaccel.launch.tasks import RemoteRepr, group_values

pytestmark = pytest.mark.multiprocess


def test_run_returns_one_result_per_rank_for_lambdas_and_closures(pool: WorkerPool) -> None:
    offset = 100

    def scaled(extra: int, scale: int = 1) -> tuple[int, int]:
        from nbaccel import PartialState

        state = PartialState()
        return (state.process_index * scale + extra + offset, state.num_processes)

    assert pool.run(lambda: int(os.environ["RANK"]) ** 2) == [0, 1]
    assert pool.run(scaled, 7, scale=10) == [(107, 2), (117, 2)]


def test_warm_round_trip_is_measured_not_asserted(pool: WorkerPool) -> None:
    pids = [row["pid"] for row in pool.status()]
    times = []
    for _ in range(20):
        start = time.perf_counter()
        assert pool.run(lambda: 1) == [1, 1]
        times.append(time.perf_counter() - start)
    print(f"warm pool.run(lambda: 1) round trip: median {statistics.median(times) * 1e3:.2f} ms")
    assert [row["pid"] for row in pool.status()] == pids  # the same processes answered


def test_execute_returns_the_last_expression_per_rank_like_ipython(pool: WorkerPool) -> None:
    assert pool.execute("rank, local_rank, world_size, str(device)") == [
        (0, 0, 2, "cpu"),
        (1, 1, 2, "cpu"),
    ]
    assert pool.execute("z = rank + 40") == [None, None]
    assert pool.execute("z + 2;") == [None, None]  # a trailing ";" shows nothing, as in IPython
    assert pool.execute("z + 2\n") == [42, 43]
    assert pool.execute("def twice(v):\n    return 2 * v\n\ntwice(z)") == [80, 82]


def test_namespaces_persist_and_ranks_select(pool: WorkerPool) -> None:
    pool.push({"lr": 0.5, "name": "adam"})
    assert pool.pull("lr") == [0.5, 0.5]
    pool.push({"lr": 0.1}, ranks=1)
    assert pool.pull("lr") == [0.5, 0.1]
    assert pool.execute("lr * 10", ranks=[1]) == [1.0]
    assert pool.pull("name", ranks=0) == ["adam"]
    pool.execute("only_here = True", ranks=0)
    with pytest.raises(NameError, match="only_here"):
        pool.pull("only_here")


def test_collectives_run_on_the_group_joined_at_start(pool: WorkerPool) -> None:
    source = (
        "import torch, torch.distributed as dist\n"
        "t = torch.tensor([float(rank + 1)])\n"
        "dist.all_reduce(t)\n"
        "t.item()"
    )
    assert pool.execute(source) == [3.0, 3.0]


def test_an_accelerator_prepared_in_one_cell_trains_in_the_next(pool: WorkerPool) -> None:
    pool.execute(
        "import torch\n"
        "from nbaccel import Accelerator\n"
        "accelerator = Accelerator()\n"
        "torch.manual_seed(0)\n"
        "model = torch.nn.Linear(4, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "model, opt = accelerator.prepare(model, opt)\n",
        label="In [1]",
    )
    before = pool.execute("[p.detach().clone() for p in model.parameters()][0].sum().item()")
    losses = pool.execute(
        "x = torch.randn(8, 4) + rank\n"
        "loss = model(x).pow(2).mean()\n"
        "accelerator.backward(loss)\n"
        "opt.step(); opt.zero_grad()\n"
        "(accelerator.num_processes, accelerator.process_index, loss.item() > 0)",
        label="In [2]",
    )
    after = pool.execute("[p.detach().clone() for p in model.parameters()][0].sum().item()")
    assert losses == [(2, 0, True), (2, 1, True)]
    assert before[0] == before[1] and after[0] == after[1]  # DDP kept the ranks in step
    assert after != before


def test_unpicklable_values_come_back_as_their_repr(pool: WorkerPool) -> None:
    values = pool.execute("import threading\nlock = threading.Lock()\nlock")
    assert all(isinstance(v, RemoteRepr) and "lock" in repr(v) for v in values)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pool.run(lambda: __import__("threading").Lock())
    assert group_values([1, 1]) == [([0, 1], 1)]
    assert group_values([1, 2]) == [([0], 1), ([1], 2)]


def test_output_is_whole_rank_prefixed_lines(
    pool: WorkerPool, capfd: pytest.CaptureFixture
) -> None:
    capfd.readouterr()
    pool.execute("print('alpha', 'beta', rank)\nprint('two\\nlines')")
    lines = capfd.readouterr().out.splitlines()
    for rank in (0, 1):
        assert f"[rank{rank}]: alpha beta {rank}" in lines
        assert f"[rank{rank}]: two" in lines and f"[rank{rank}]: lines" in lines


def test_status_has_one_row_per_rank(pool: WorkerPool) -> None:
    rows = pool.status()
    assert [row["rank"] for row in rows] == [0, 1]
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    for row in rows:
        assert row["pid"] in children
        assert row["state"] == "idle" and row["cell"] is None
        assert row["rss"] > 10_000_000 and row["device"] == "cpu"
    seen = pool.execute("import os\nos.getpid()", label="In [9]")
    assert seen == [row["pid"] for row in rows]
    assert [row["last_cell"] for row in pool.status()] == ["In [9]", "In [9]"]


def test_a_rank_gives_back_the_memory_a_task_freed(pool: WorkerPool) -> None:
    """A rank keeps freed memory for reuse while a task runs (``worker/allocator.py``), and
    gives it back to the system once the task has replied: an idle rank does not hold what
    a cell used and freed (200 MiB of 1 MiB tensors, in the heap, below the trim threshold:
    kept until then)."""

    def grow_and_free() -> int:
        import torch

        blocks = [torch.ones(1 << 20, dtype=torch.uint8) for _ in range(200)]
        return int(sum(int(b[-1]) for b in blocks) / len(blocks))

    before = [row["rss"] for row in pool.status()]
    assert pool.run(grow_and_free) == [1, 1]
    deadline = time.monotonic() + 20
    while True:
        grown = [row["rss"] - b for row, b in zip(pool.status(), before, strict=True)]
        if all(g < 100 << 20 for g in grown) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert all(g < 100 << 20 for g in grown), grown


def test_bad_arguments_fail_before_any_process_starts() -> None:
    before = psutil.Process().children(recursive=True)
    cases = [
        ({"num_processes": 0}, ValueError, "num_processes"),
        ({"num_processes": 2, "mixed_precision": "fp12"}, ValueError, "mixed_precision"),
        ({"num_processes": 2, "start_method": "forkserver"}, ValueError, "start_method"),
        ({"num_processes": 2, "timeout": -1}, ValueError, "timeout"),
        ({"num_processes": 2, "grace_period": 0}, ValueError, "grace_period"),
        ({"num_processes": 2, "cpu": "yes"}, TypeError, "cpu"),
        ({"num_processes": 2, "on_event": 3}, TypeError, "on_event"),
        ({"num_processes": 2, "dashboard": 3}, TypeError, "dashboard"),
    ]
    for kwargs, kind, word in cases:
        with pytest.raises(kind, match=word):
            WorkerPool(**kwargs)  # type: ignore[arg-type]
    assert psutil.Process().children(recursive=True) == before


def test_bad_call_arguments_are_refused(pool: WorkerPool) -> None:
    with pytest.raises(ValueError, match="ranks"):
        pool.execute("1", ranks=[2])
    with pytest.raises(TypeError, match="callable"):
        pool.run(3)  # type: ignore[arg-type]
    with pytest.raises(SyntaxError):
        pool.execute("def (")
    with pytest.raises(TypeError, match="variable names"):
        pool.push({"not a name": 1})
    assert pool.execute("1 + 1") == [2, 2]  # nothing of that reached the ranks


def test_values_larger_than_a_pipe_travel_both_ways(pool: WorkerPool) -> None:
    import torch

    big = torch.arange(1_000_000, dtype=torch.float32)  # 4 MB: many pipe buffers
    pool.push({"big": big})
    assert pool.execute("float(big.sum())") == [float(big.sum())] * 2
    back = pool.pull("big", ranks=1)[0]
    assert torch.equal(back, big)
