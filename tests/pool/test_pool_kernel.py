"""WorkerPool in real Jupyter kernels: live lines, rich display, a kernel interrupt, and workers
that end with their kernel."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from tests.support.kernel import (
    Cell,
    Kernel,
    ProcessSnapshot,
    click_button,
    running_kernel,
    wait_gone,
    widget_buttons,
)

pytestmark = pytest.mark.notebook


@pytest.fixture(scope="module")
def kernel() -> Iterator[Kernel]:
    """One kernel with a warm pool of 2 CPU ranks."""
    with running_kernel() as kernel:
        kernel.ok(
            """
            import ast, time
            from nbaccel import WorkerPool
            pool = WorkerPool(2, cpu=True, grace_period=5.0)
            """,
            timeout=120,
        )
        yield kernel
        kernel.execute("pool.shutdown()")


def _pids(kernel: Kernel) -> list[int]:
    return [int(p) for p in kernel.value("[row['pid'] for row in pool.status()]")[1:-1].split(",")]


def test_lines_reach_the_cell_live_whole_and_prefixed(kernel: Kernel) -> None:
    cell = kernel.ok(
        """
        pool.execute("import time\\nprint('first', rank, 'of', world_size)\\n"
                     "time.sleep(1.5)\\nprint('second', rank)")
        """
    )
    lines = cell.lines()
    for rank in (0, 1):
        assert f"[rank{rank}]: first {rank} of 2" in lines, cell.describe()
        assert f"[rank{rank}]: second {rank}" in lines, cell.describe()
    first = next(o for o in cell.outputs if "first" in o.text)
    assert cell.finished is not None and cell.finished - first.at > 1.0  # shown while running


def test_rich_display_goes_through_the_display_channel(kernel: Kernel) -> None:
    cell = kernel.ok(
        """
        pool.execute("from IPython.display import display, HTML\\n"
                     "display(HTML(f'<b>table of rank {rank}</b>'))")
        """
    )
    shown = [d for d in cell.displays if d.kind == "display_data"]
    assert [d.data.get("text/html") for d in shown] == ["<b>table of rank 0</b>"], cell.describe()
    assert shown[0].rank == 0


def test_a_rank_error_shows_its_type_rank_and_traceback_in_the_cell(kernel: Kernel) -> None:
    kernel.ok("pool.execute('kept_here = 1')")
    cell = kernel.execute(
        """
        pool.execute("if rank == 1:\\n    raise ValueError('bad shard')", label="In [e]")
        """
    )
    assert cell.status == "error" and cell.ename == "ValueError", cell.describe()
    text = cell.error_text
    assert "rank 1 failed: ValueError: bad shard" in text and "<nbaccel cell In [e]>" in text
    assert kernel.value("pool.pull('kept_here')") == "[1, 1]"


def test_a_rank_stuck_in_a_collective_is_named_and_the_group_restarts(kernel: Kernel) -> None:
    kernel.ok("pool.execute('lost_here = 1')\npool.grace_period = 1.5")
    cell = kernel.execute(
        """
        pool.execute("import torch, torch.distributed as dist\\n"
                     "if rank == 1:\\n    raise KeyError('no shard')\\n"
                     "dist.all_reduce(torch.ones(1))", label="In [s]")
        """
    )
    kernel.ok("pool.grace_period = 5.0")
    assert cell.status == "error" and cell.ename == "KeyError", cell.describe()
    text = cell.error_text
    assert "rank(s) [0] did not finish In [s]" in text and "dist.all_reduce" in text, text
    assert "namespace was lost" in text
    assert kernel.value("pool.execute('\\'lost_here\\' in globals()')") == "[False, False]"


def test_a_kernel_interrupt_stops_the_task_on_every_rank_and_keeps_the_pool(
    kernel: Kernel,
) -> None:
    kernel.ok("pool.execute('kept = rank + 10')")
    pids = _pids(kernel)
    cell = kernel.submit(
        """
        pool.execute("import time\\nsteps = 0\\nprint('looping', rank, flush=True)\\n"
                     "while True:\\n    steps += 1\\n    time.sleep(0.001)", label="In [long]")
        """
    )
    asked: list[bool] = []

    def interrupt_when_looping(message: dict[str, Any], seen: Cell) -> None:
        if not asked and seen.stdout.count("looping") == 2:
            asked.append(True)
            kernel.interrupt()

    kernel.collect(cell, timeout=60, on_message=interrupt_when_looping)
    assert asked and cell.status == "error" and cell.ename == "KeyboardInterrupt", cell.describe()
    assert "every namespace is kept" in cell.error_text
    assert kernel.value("pool.pull('kept')") == "[10, 11]"
    assert kernel.value("all(n > 0 for n in pool.pull('steps'))") == "True"
    assert _pids(kernel) == pids
    assert kernel.value("pool.run(lambda: 'next')") == "['next', 'next']"


def test_a_dashboard_pool_shows_a_widget(kernel: Kernel) -> None:
    cell = kernel.ok(
        """
        with WorkerPool(2, cpu=True, dashboard=True) as shown_pool:
            shown_pool.execute("1", label="In [d]")
            print(shown_pool.dashboard.summary())
        """,
        timeout=120,
    )
    kinds = {key for d in cell.displays for key in d.data}
    assert "application/vnd.jupyter.widget-view+json" in kinds, cell.describe()
    assert "rank 0:" in cell.stdout and "rank 1:" in cell.stdout


def test_the_dashboards_stop_interrupts_a_pool_call_and_keeps_the_pool(kernel: Kernel) -> None:
    buttons: dict[str, str] = {}
    started = kernel.execute(
        "board_pool = WorkerPool(2, cpu=True, dashboard=True, grace_period=5.0)\n"
        "board_pool.execute('kept = rank + 1')",
        timeout=120,
        on_message=lambda message, _cell: widget_buttons(message, buttons),
    )
    assert started.status == "ok" and "Stop" in buttons, started.describe()
    cell = kernel.submit(
        "board_pool.execute(\"import time\\nprint('looping', rank, flush=True)\\n\"\n"
        "                   \"while True:\\n    time.sleep(0.01)\", label='In [long]')"
    )
    queued = kernel.submit("print('queued cell ran')")  # waits its turn behind the long cell
    clicked: list[float] = []

    def stop_when_looping(message: dict[str, Any], seen: Cell) -> None:
        if not clicked and seen.stdout.count("looping") == 2:
            clicked.append(time.monotonic())
            click_button(kernel, buttons["Stop"])

    kernel.collect(cell, timeout=60, on_message=stop_when_looping)
    assert clicked and cell.status == "error" and cell.ename == "KeyboardInterrupt", cell.describe()
    assert "stopped (the dashboard's Stop) on every rank" in cell.error_text, cell.error_text
    assert cell.finished is not None and cell.finished - clicked[0] < 8.0
    kernel.collect(queued, timeout=30)  # aborted after the error, as behind any failing cell
    assert queued.status == "aborted" and "queued cell ran" not in queued.stdout
    assert kernel.value("board_pool.pull('kept')") == "[1, 2]"
    assert kernel.value("board_pool.run(lambda: 'next')") == "['next', 'next']"
    kernel.ok("board_pool.shutdown()")


def test_workers_end_with_their_kernel_on_restart_and_shutdown() -> None:
    with running_kernel() as other:
        start = "from nbaccel import WorkerPool\npool = WorkerPool(2, cpu=True)"
        other.ok(start, timeout=120)
        pids = _pids(other)
        other.manager.restart_kernel(now=True)
        other.client.wait_for_ready(timeout=60)
        assert wait_gone(pids, 15) == []
        other.ok(start, timeout=120)
        pids = _pids(other)
        other.shutdown(now=True)
        assert wait_gone(pids, 15) == []


def test_twenty_start_stop_cycles_in_one_kernel_leave_nothing_behind(tmp_path: Path) -> None:
    """Processes, descriptors, threads, listening sockets, temporary files of the kernel."""
    with running_kernel(TMPDIR=str(tmp_path)) as other:
        cycle = "%nbaccel start -n 2 --cpu\n%nbaccel stop"
        other.ok("%load_ext nbaccel\n" + cycle, timeout=120)  # what torch keeps for good
        other.settle()
        before = ProcessSnapshot.take(other.pid, str(tmp_path))
        for i in range(20):
            other.ok("%nbaccel start -n 2 --cpu", timeout=120)
            cell = other.ok(f"%%nbaccel\nprint('cycle', {i}, rank)")
            assert f"[rank1]: cycle {i} 1" in cell.stdout, cell.describe()
            other.ok("%nbaccel stop", timeout=60)
        other.settle()
        before.assert_same(ProcessSnapshot.take(other.pid, str(tmp_path)))
