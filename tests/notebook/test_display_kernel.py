"""Everything a worker shows reaches the cell, in a real Jupyter kernel (fork and spawn).

One kernel runs every launch of this module: rich display, a display handle, a ``tqdm.auto``
loop, logging through a handler made in the kernel, ``display_ranks``, and a Transformers
``Trainer``. The kernel's own log (its stdout and stderr, as the kernel manager sees them) is
written to a file that the last test reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")
pytest.importorskip("ipywidgets")

from tests.support.kernel import Cell, Display, Kernel, running_kernel

pytestmark = pytest.mark.notebook

FORK_WARNING = "attempted to send message from fork"
_DOUBLED = re.compile(r"^\[rank\d+\]: \[rank\d+\]:", re.MULTILINE)

_SETUP = """
import logging, sys, tempfile
logging.basicConfig(level=logging.INFO, format="KERNEL-HANDLER %(message)s", stream=sys.stderr)
from nbaccel import notebook_launcher

def show_everything(clear=False):
    import logging, os, sys
    from IPython.display import HTML, clear_output, display
    from tqdm.auto import tqdm
    rank = os.environ["RANK"]
    # a spawned worker has no handler from the kernel: this one is made in the worker
    logging.basicConfig(level=logging.INFO, format="WORKER-HANDLER %(message)s", stream=sys.stderr)
    logging.getLogger("nbaccel.test").info("first write of %s", rank)  # before any print
    print(f"text before display {rank}", flush=True)
    display(HTML(f"<b>hello from {rank}</b>"))
    handle = display(HTML(f"<i>first {rank}</i>"), display_id=True)
    handle.update(HTML(f"<i>second {rank}</i>"))
    for _ in tqdm(range(30), desc=f"steps{rank}"):
        pass
    logging.getLogger("nbaccel.test").info("logged on %s", rank)
    if clear:
        clear_output()
    return rank
"""


@pytest.fixture(scope="module")
def log_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kernel-log") / "kernel.log"


@pytest.fixture(scope="module")
def kernel(log_path: Path) -> Iterator[Kernel]:
    """One kernel for the module, its log in ``log_path``; always shut down."""
    with running_kernel(log_path=str(log_path)) as kernel:
        kernel.ok(_SETUP, timeout=120)
        yield kernel


_CELLS: dict[str, Cell] = {}


def _launch(kernel: Kernel, key: str, call: str, timeout: float = 240.0) -> Cell:
    """Run ``call`` once per module (a cell that must succeed) and keep its cell."""
    if key not in _CELLS:
        _CELLS[key] = kernel.ok(call, timeout)
    return _CELLS[key]


def _everything(kernel: Kernel, method: str, ranks: str = "None") -> Cell:
    return _launch(
        kernel,
        f"{method}-{ranks}",
        f"r = notebook_launcher(show_everything, ({ranks == '[1]'},), num_processes=2, cpu=True, "
        f"start_method={method!r}, display_ranks={ranks})",
    )


def _html(displays: list[Display], needle: str) -> list[Display]:
    return [d for d in displays if needle in str(d.data.get("text/html", ""))]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_rich_display_comes_from_rank0_only_and_after_its_earlier_text(
    kernel: Kernel, method: str
) -> None:
    cell = _everything(kernel, method)
    hello = _html(cell.displays, "hello from")
    assert [d.kind for d in hello] == ["display_data"], cell.describe()
    assert "<b>hello from 0</b>" in hello[0].data["text/html"]
    assert hello[0].rank == 0
    before = [o for o in cell.outputs if "[rank0]: text before display 0" in o.text]
    assert before and before[0].at <= hello[0].at, "rank 0's earlier text must come first"


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_display_handle_update_replaces_the_same_output(kernel: Kernel, method: str) -> None:
    cell = _everything(kernel, method)
    first, second = _html(cell.displays, "first 0"), _html(cell.displays, "second 0")
    assert [d.kind for d in first] == ["display_data"], cell.describe()
    assert [d.kind for d in second] == ["update_display_data"]
    assert first[0].display_id and first[0].display_id == second[0].display_id


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_tqdm_auto_in_a_worker_draws_one_notebook_bar_that_reaches_its_total(
    kernel: Kernel, method: str
) -> None:
    cell = _everything(kernel, method)
    bars = [
        d
        for d in cell.displays
        if d.kind == "display_data" and "application/vnd.jupyter.widget-view+json" in d.data
    ]
    assert len(bars) == 1 and "steps0" in bars[0].data["text/plain"], cell.describe()
    states = [d.content.get("data", {}).get("state", {}) for d in cell.displays]
    assert {"value": 30} in [{k: v for k, v in s.items() if k == "value"} for s in states]
    texts = " ".join(str(s.get("value", "")) for s in states)
    assert "30/30" in texts
    assert "steps0:" not in cell.stderr and "steps1" not in cell.stderr  # no text bars


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_logging_lines_of_workers_are_whole_and_rank_prefixed(kernel: Kernel, method: str) -> None:
    cell = _everything(kernel, method)
    handler = "KERNEL-HANDLER" if method == "fork" else "WORKER-HANDLER"
    for rank in (0, 1):
        assert f"[rank{rank}]: {handler} first write of {rank}\n" in cell.stderr, cell.describe()
        assert f"[rank{rank}]: {handler} logged on {rank}\n" in cell.stderr, cell.describe()
    assert not _DOUBLED.search(cell.stderr)


def test_display_ranks_shows_the_chosen_rank_labelled(kernel: Kernel) -> None:
    cell = _everything(kernel, "fork", "[1]")
    hello = _html(cell.displays, "hello from")
    assert len(hello) == 1 and hello[0].rank == 1, cell.describe()
    assert "[rank1]" in hello[0].data["text/html"] and "hello from 1" in hello[0].data["text/html"]
    assert str(hello[0].data["text/plain"]).startswith("[rank1]: ")
    assert [d.kind for d in cell.displays].count("clear_output") == 1  # rank 1's clear_output


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_transformers_trainer_shows_its_table_once(kernel: Kernel, method: str) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("sklearn")
    kernel.ok("from nbaccel.examples.trainer import train_with_trainer", timeout=120)
    cell = _launch(
        kernel,
        f"trainer-{method}",
        "results = notebook_launcher(train_with_trainer, (tempfile.mkdtemp(), 1.0), "
        "kwargs=dict(ddp_find_unused_parameters=True), "
        f"num_processes=2, cpu=True, start_method={method!r}); print(results)",
    )
    # the live table: one output (a display id) that training updates in place; the final
    # metrics table after evaluate() has no id, as in a single process
    live = {d.display_id for d in _html(cell.displays, "Training Loss")} - {None}
    assert len(live) == 1, cell.describe()
    table = [d for d in cell.displays if d.display_id in live]
    assert [d.kind for d in table].count("display_data") == 1
    assert [d.kind for d in table].count("update_display_data") >= 2
    assert "Accuracy" in table[-1].data["text/html"]
    assert {d.rank for d in cell.displays if d.kind != "comm_msg"} == {0}
    assert "'world_size': 2" in cell.stdout and "'rank': 1" in cell.stdout
    assert "[rank1]:[W" in cell.stderr  # torch's own prefix (find_unused_parameters' warning)
    assert not _DOUBLED.search(cell.stderr), cell.stderr
    for line in (cell.stdout + cell.stderr).splitlines():
        assert line.startswith(("[rank", "Launching ", "[{'rank'")), line


def test_the_kernel_log_holds_no_message_sent_from_a_fork(kernel: Kernel, log_path: Path) -> None:
    for method in ("fork", "spawn"):
        _everything(kernel, method)
    _everything(kernel, "fork", "[1]")
    cells = list(_CELLS.values())
    kernel.ok("print('flush')")
    assert FORK_WARNING not in log_path.read_text(errors="replace")
    assert all(FORK_WARNING not in cell.stderr + cell.stdout for cell in cells)
    # the control: a child forked without nbaccel that displays does leave the warning there
    kernel.ok(
        """
        import os, time
        from IPython.display import display
        _pid = os.fork()
        if _pid == 0:
            display("from a plain fork")
            os._exit(0)
        os.waitpid(_pid, 0)
        time.sleep(0.5)
        """
    )
    assert FORK_WARNING in log_path.read_text(errors="replace")
