"""notebook_launcher's lifecycle in a real kernel: interrupt, many launches, a dying kernel.

Interrupting the cell stops every worker and the next launch works; twenty launches in a row
leave no process, descriptor, thread, listening socket or temporary file behind; when the
kernel itself dies, its workers die with it.
"""

from __future__ import annotations

import os
import re
import signal
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
    pids_alive,
    running_kernel,
    wait_gone,
)

pytestmark = pytest.mark.notebook

_SETUP = """
import os, time
from nbaccel import notebook_launcher

def sleeper():
    print("pid", os.getpid(), flush=True)
    time.sleep(60)
    return "woke up"

def quick(i):
    print("quick", i)
    return (i, int(os.environ["RANK"]))
"""
_PID_LINE = re.compile(r"^\[rank(\d)\]: pid (\d+)$", re.MULTILINE)


@pytest.fixture(scope="module")
def kernel_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kernel's own TMPDIR, so that nothing else writes to the directory it is judged by."""
    return tmp_path_factory.mktemp("kernel-tmp")


@pytest.fixture(scope="module")
def kernel(kernel_tmp: Path) -> Iterator[Kernel]:
    """One kernel for the module (TMPDIR = ``kernel_tmp``); always shut down."""
    with running_kernel(TMPDIR=str(kernel_tmp)) as kernel:
        kernel.ok(_SETUP)
        assert kernel.value("__import__('tempfile').gettempdir()") == repr(str(kernel_tmp))
        yield kernel


def _start_sleepers(kernel: Kernel, method: str) -> tuple[Cell, list[int]]:
    """Submit a launch of two 60 s sleepers; return the running cell and the workers' pids."""
    cell = kernel.submit(f"notebook_launcher(sleeper, num_processes=2, start_method={method!r})")
    pids: dict[int, int] = {}

    def until_both_pids(message: dict[str, Any], running: Cell) -> None:
        for rank, pid in _PID_LINE.findall(running.stdout):
            pids[int(rank)] = int(pid)
        if len(pids) == 2:
            raise _BothRunning

    try:
        kernel.collect(cell, timeout=60, on_message=until_both_pids)
    except _BothRunning:
        return cell, [pids[0], pids[1]]
    raise AssertionError(f"the workers never reported their pids:\n{cell.describe()}")


class _BothRunning(Exception):
    """Both workers printed their pid (stops collecting while the cell runs on)."""


def _interrupt(kernel: Kernel, method: str) -> None:
    cell, pids = _start_sleepers(kernel, method)
    assert cell.idle is False and pids_alive(pids) == pids
    interrupted = time.monotonic()
    kernel.interrupt()
    kernel.collect(cell, timeout=30)
    assert cell.finished is not None
    assert cell.status == "error" and cell.ename == "KeyboardInterrupt", cell.describe()
    assert cell.finished - interrupted < 5.0, f"{cell.finished - interrupted:.1f}s"
    assert pids_alive(pids) == [], f"workers {pids} outlived the interrupted cell ({method})"


def _snapshot(kernel: Kernel, kernel_tmp: Path) -> ProcessSnapshot:
    kernel.settle()
    return ProcessSnapshot.take(kernel.pid, str(kernel_tmp))


def test_interrupt_stops_every_worker_and_the_next_launch_works(
    kernel: Kernel, kernel_tmp: Path
) -> None:
    kernel.ok("print(notebook_launcher(quick, (0,), num_processes=2, start_method='fork'))")
    before = _snapshot(kernel, kernel_tmp)
    handlers = "[repr(__import__('signal').getsignal(s)) for s in (2, 15, 17)]"  # INT TERM CHLD
    handlers_before = kernel.value(handlers)
    _interrupt(kernel, "fork")
    _interrupt(kernel, "fork")
    _interrupt(kernel, "spawn")
    cell = kernel.ok("print(notebook_launcher(quick, (1,), num_processes=2, start_method='fork'))")
    assert "[(1, 0), (1, 1)]" in cell.stdout, cell.describe()
    assert kernel.value(handlers) == handlers_before, "signal handlers were not restored"
    before.assert_same(_snapshot(kernel, kernel_tmp))


def test_twenty_launches_in_a_row_leave_nothing_behind(kernel: Kernel, kernel_tmp: Path) -> None:
    kernel.ok("print(notebook_launcher(quick, (-1,), num_processes=2, start_method='fork'))")
    before = _snapshot(kernel, kernel_tmp)
    for i in range(20):
        cell = kernel.ok(
            f"print(notebook_launcher(quick, ({i},), num_processes=2, start_method='fork'))"
        )
        assert f"[({i}, 0), ({i}, 1)]" in cell.stdout, cell.describe()
    before.assert_same(_snapshot(kernel, kernel_tmp))


@pytest.mark.parametrize(
    ("method", "how"),
    [("fork", "sigkill-kernel-pid"), ("spawn", "shutdown-now")],
)
def test_workers_die_with_the_kernel(method: str, how: str) -> None:
    with running_kernel() as kernel:
        kernel.ok(_SETUP)
        _, pids = _start_sleepers(kernel, method)
        assert pids_alive(pids) == pids
        if how == "sigkill-kernel-pid":  # only the kernel: the workers are not signalled
            os.kill(kernel.pid, signal.SIGKILL)
        else:  # what "Shut down kernel" does (SIGKILL to the kernel's process group)
            kernel.manager.shutdown_kernel(now=True)
        assert wait_gone(pids, timeout=5.0) == [], f"workers outlived the kernel ({how})"
