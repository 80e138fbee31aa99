"""The ``%nbaccel`` / ``%%nbaccel`` magics in a real Jupyter kernel, on one pool of 2 CPU ranks."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from tests.support.kernel import Cell, Kernel, running_kernel, wait_gone

pytestmark = [pytest.mark.notebook, pytest.mark.timeout(180)]


def _outs(kernel: Kernel, code: str, timeout: float = 60.0) -> tuple[Cell, list[str]]:
    """Run a cell; return it and the ``text/plain`` of every ``execute_result`` it sent."""
    found: list[str] = []

    def on_message(message: dict[str, Any], cell: Cell) -> None:
        if message["msg_type"] == "execute_result":
            found.append(message["content"]["data"]["text/plain"])

    return kernel.execute(code, timeout, on_message), found


def _children(kernel: Kernel) -> list[int]:
    return [p.pid for p in psutil.Process(kernel.pid).children(recursive=True)]


def _usage_error(kernel: Kernel, code: str, *words: str) -> None:
    cell = kernel.execute(code)
    assert cell.status == "error" and cell.ename == "UsageError", cell.describe()
    for word in words:
        assert word in cell.evalue, cell.describe()


@pytest.fixture(scope="module")
def kernel() -> Iterator[Kernel]:
    """One kernel with the extension loaded; nothing started yet."""
    with running_kernel() as kernel:
        kernel.ok("%load_ext nbaccel")
        yield kernel


@pytest.fixture(scope="module")
def pool(kernel: Kernel) -> Iterator[Kernel]:
    """The kernel with a running pool of 2 CPU ranks (started once for the module)."""
    cell = kernel.execute("%nbaccel start -n 2 --cpu", timeout=120)
    assert cell.status == "ok", cell.describe()
    assert "pool of 2 processes is ready" in cell.stdout, cell.describe()
    yield kernel
    kernel.execute("%nbaccel stop", timeout=60)


# -- usage errors, before anything starts ------------------------------------------------------


def test_bad_magic_lines_are_usage_errors_and_start_nothing(kernel: Kernel) -> None:
    _usage_error(kernel, "%nbaccel", "needs a command", "%nbaccel start -n N")
    _usage_error(kernel, "%nbaccel launch -n 2", "invalid choice: 'launch'")
    _usage_error(kernel, "%nbaccel start", "say how many processes")
    _usage_error(kernel, "%nbaccel start -n two", "invalid int value: 'two'")
    _usage_error(kernel, "%nbaccel start -n 2 --precision bf16", "unrecognized arguments")
    _usage_error(kernel, "%nbaccel start -n 2 --mixed_precision fp9", "mixed_precision", "fp9")
    _usage_error(kernel, "%nbaccel start -n 0", "num_processes")
    _usage_error(kernel, "%%nbaccel --ranks 0;1\nx = 1", "--ranks")
    _usage_error(kernel, "%%nbaccel\nx = 1", "no pool is running", "%nbaccel start -n 2")
    _usage_error(kernel, "%nbaccel auto on", "no pool is running")
    _usage_error(kernel, "%nbaccel status", "no pool is running")
    assert _children(kernel) == [], "a usage error started processes"
    assert "no pool is running" in kernel.ok("%nbaccel stop").stdout


# -- start, status, output ---------------------------------------------------------------------


def test_status_shows_one_row_per_live_rank(pool: Kernel) -> None:
    cell, outs = _outs(pool, "%nbaccel status")
    assert cell.status == "ok", cell.describe()
    assert len(outs) == 1, outs
    lines = outs[0].splitlines()
    assert lines[0].split()[:3] == ["rank", "pid", "state"], outs[0]
    rows = [line.split() for line in lines[1:]]
    assert [row[0] for row in rows] == ["0", "1"], outs[0]
    pids = [int(row[1]) for row in rows]
    assert set(pids) <= set(_children(pool)), (pids, _children(pool))
    _usage_error(pool, "%nbaccel start -n 2", "already running")


def test_cell_runs_on_every_rank_with_prefixed_whole_lines(pool: Kernel) -> None:
    cell = pool.ok(
        """
        %%nbaccel
        print("hello", rank, "of", world_size, sep=" ")
        print("two\\nlines", rank)
        """
    )
    assert sorted(cell.lines()) == [
        "[rank0]: hello 0 of 2",
        "[rank0]: lines 0",
        "[rank0]: two",
        "[rank1]: hello 1 of 2",
        "[rank1]: lines 1",
        "[rank1]: two",
    ], cell.describe()
    for rank in (0, 1):  # each rank's lines in their order
        mine = [line for line in cell.lines() if line.startswith(f"[rank{rank}]")]
        assert mine[0].startswith(f"[rank{rank}]: hello"), cell.describe()


def test_output_reaches_the_cell_while_it_runs(pool: Kernel, tmp_path: Path) -> None:
    """Causal: rank 0 finishes only after the test has seen its line in the iopub stream."""
    release = tmp_path / "release"
    seen: list[bool] = []

    def on_message(message: dict[str, Any], cell: Cell) -> None:
        if not seen and "[rank0]: waiting\n" in cell.stdout:
            seen.append(not cell.idle)
            release.touch()

    cell = pool.submit(
        f"""
        %%nbaccel --ranks 0
        import os, time
        print("waiting")
        deadline = time.monotonic() + 30
        while not os.path.exists({str(release)!r}) and time.monotonic() < deadline:
            time.sleep(0.02)
        os.path.exists({str(release)!r})
        """
    )
    pool.collect(cell, timeout=60, on_message=on_message)
    assert cell.status == "ok" and seen == [True], cell.describe()


def test_rank_variables_and_out_per_rank(pool: Kernel) -> None:
    cell, outs = _outs(
        pool, "%%nbaccel\n(rank, local_rank, world_size, str(device), type(rank).__name__)"
    )
    assert cell.status == "ok", cell.describe()
    assert outs == ["[rank0]: (0, 0, 2, 'cpu', 'int')\n[rank1]: (1, 1, 2, 'cpu', 'int')"], outs
    assert pool.value("_[1][0]") == "1"  # the per-rank values are the cell's Out


def test_identical_values_are_shown_once_and_statements_show_nothing(pool: Kernel) -> None:
    cell, outs = _outs(pool, "%%nbaccel\nanswer = 40 + world_size\nanswer")
    assert cell.status == "ok" and outs == ["42"], (outs, cell.describe())
    assert pool.value(f"Out[{cell.execution_count}]") == "42"
    cell, outs = _outs(pool, "%%nbaccel\nanswer += 1")
    assert cell.status == "ok" and outs == [], outs
    cell, outs = _outs(pool, "%%nbaccel\nanswer;")
    assert cell.status == "ok" and outs == [], outs


def test_ranks_option_runs_the_cell_on_those_ranks_only(pool: Kernel) -> None:
    cell, outs = _outs(pool, "%%nbaccel --ranks 1\nonly = rank\nprint('only', rank)\nrank")
    assert cell.lines() == ["[rank1]: only 1"] and outs == ["1"], cell.describe()
    cell, outs = _outs(pool, "%%nbaccel --ranks 0,1\n'only' in globals()")
    assert outs == ["[rank0]: False\n[rank1]: True"], outs
    _usage_error(pool, "%%nbaccel --ranks 2\nrank", "ranks 0 to 1")


# -- training across cells ---------------------------------------------------------------------

_PREPARE = """
%%nbaccel
import torch
from nbaccel import Accelerator

torch.manual_seed(0)
accelerator = Accelerator(cpu=True)
xs = torch.randn(64, 4)
ys = xs @ torch.tensor([1.0, -2.0, 3.0, 0.5]) + 0.1
data = torch.utils.data.TensorDataset(xs, ys.unsqueeze(1))
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(data, batch_size=8)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
(accelerator.process_index, accelerator.num_processes, len(loader))
"""
_TRAIN = """
%%nbaccel
losses = []
for xb, yb in loader:
    loss = torch.nn.functional.mse_loss(model(xb), yb)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    losses.append(round(accelerator.gather(loss.detach()).mean().item(), 6))
print("epoch loss", losses[-1])
losses
"""


def test_a_model_prepared_in_one_cell_trains_in_the_next(pool: Kernel) -> None:
    cell, outs = _outs(pool, _PREPARE, timeout=120)
    assert cell.status == "ok", cell.describe()
    assert outs == ["[rank0]: (0, 2, 4)\n[rank1]: (1, 2, 4)"], outs
    firsts = []
    for _ in range(3):
        cell, outs = _outs(pool, _TRAIN, timeout=120)
        assert cell.status == "ok", cell.describe()
        assert len(outs) == 1 and not outs[0].startswith("[rank"), outs  # same on both ranks
        firsts.append(eval(outs[0])[0])
    assert firsts[2] < firsts[1] < firsts[0], firsts
    assert len(cell.lines()) == 2, cell.describe()


# -- errors and interrupts ---------------------------------------------------------------------


def test_an_exception_shows_its_type_rank_and_line_and_the_pool_stays(pool: Kernel) -> None:
    pool.ok("%%nbaccel\nkept = rank * 10")
    cell = pool.execute(
        """
        %%nbaccel
        def check(value):
            if rank == 1:
                raise ValueError(f"bad value {value}")
            return value
        check(7)
        """,
        timeout=60,
    )
    assert cell.status == "error" and cell.ename == "ValueError", cell.describe()
    assert cell.evalue == "bad value 7", cell.describe()
    text = cell.error_text
    assert "rank 1" in text and 'raise ValueError(f"bad value {value}")' in text, text
    cell, outs = _outs(pool, "%%nbaccel\nkept")
    assert cell.status == "ok" and outs == ["[rank0]: 0\n[rank1]: 10"], cell.describe()


def test_interrupt_stops_the_cell_on_every_rank_and_the_next_cell_works(pool: Kernel) -> None:
    pool.ok("%%nbaccel\nsurvivor = 'still here'")
    started: list[float] = []

    def on_message(message: dict[str, Any], cell: Cell) -> None:
        if not started and cell.stdout.count("looping") == 2:
            started.append(time.monotonic())
            pool.interrupt()

    cell = pool.submit(
        """
        %%nbaccel
        import time
        print("looping")
        for step in range(3000):
            time.sleep(0.01)
        """
    )
    pool.collect(cell, timeout=60, on_message=on_message)
    assert started, cell.describe()
    assert cell.status == "error" and cell.ename == "KeyboardInterrupt", cell.describe()
    cell, outs = _outs(pool, "%%nbaccel\n(survivor, step < 2999)")
    assert cell.status == "ok" and outs == ["('still here', True)"], (outs, cell.describe())


# -- auto mode ---------------------------------------------------------------------------------


def test_auto_mode_sends_cells_to_the_pool_until_off(pool: Kernel) -> None:
    assert "auto mode is on" in pool.ok("%nbaccel auto on").stdout
    cell = pool.ok("# a comment first\nprint('auto', rank)")
    assert sorted(cell.lines()) == ["[rank0]: auto 0", "[rank1]: auto 1"], cell.describe()
    cell, outs = _outs(pool, "world_size * 3")
    assert outs == ["6"], outs
    cell, outs = _outs(pool, "%nbaccel status")  # line magics still run in the kernel
    assert cell.status == "ok" and outs[0].startswith("rank"), outs
    cell = pool.ok("%nbaccel auto\nprint('here')")  # a cell led by a magic stays in the kernel
    assert cell.lines() == ["nbaccel: auto mode is on.", "here"], cell.describe()
    assert "auto mode is off" in pool.ok("%nbaccel auto off").stdout
    cell = pool.ok("print('kernel', 'rank' in globals())")
    assert cell.lines() == ["kernel False"], cell.describe()


# -- restart and stop (last: they end the module's pool) -----------------------------------------


def test_restart_gives_fresh_namespaces_and_stop_ends_every_worker(pool: Kernel) -> None:
    before = _children(pool)
    assert "restarted" in pool.ok("%nbaccel restart", timeout=120).stdout
    cell, outs = _outs(pool, "%%nbaccel\n('kept' in globals(), world_size)")
    assert cell.status == "ok" and outs == ["(False, 2)"], (outs, cell.describe())
    after = _children(pool)
    assert "stopped" in pool.ok("%nbaccel stop", timeout=60).stdout
    assert wait_gone(before + after, timeout=15) == [], "workers outlived %nbaccel stop"
    _usage_error(pool, "%%nbaccel\nrank", "no pool is running")
    cell = pool.execute("%nbaccel start -n 2 --cpu", timeout=120)  # the fixture stops it
    assert cell.status == "ok", cell.describe()
