"""Where is every rank, in a real Jupyter kernel: ``%nbaccel where`` from a subshell while a
long cell runs (a pool's cell, a launch), and a stall reported in the launching cell with the
notebook's own cell numbers (``In [N], line L``), fork and spawn."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from tests.support.kernel import Cell, Kernel, running_kernel

pytestmark = [pytest.mark.notebook, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def kernel() -> Iterator[Kernel]:
    """One kernel with the extension loaded and a pool of 2 CPU ranks."""
    with running_kernel() as kernel:
        kernel.ok("%load_ext nbaccel\nimport time\nfrom nbaccel import notebook_launcher")
        cell = kernel.execute("%nbaccel start -n 2 --cpu --stall_timeout 60", timeout=120)
        assert cell.status == "ok", cell.describe()
        yield kernel
        kernel.execute("%nbaccel stop", timeout=60)


def _shown(kernel: Kernel, code: str, subshell: str) -> tuple[Cell, str, str]:
    """Run ``code`` in the subshell; its ``text/plain`` and ``text/html`` results."""
    found: dict[str, str] = {}

    def on_message(message: dict[str, Any], cell: Cell) -> None:
        if message["msg_type"] == "execute_result":
            found.update(message["content"]["data"])

    cell = kernel.collect(kernel.submit(code, subshell=subshell), 30, on_message)
    return cell, found.get("text/plain", ""), found.get("text/html", "")


def _subshell(kernel: Kernel) -> str:
    subshell = kernel.subshell()
    if subshell is None:
        pytest.skip("this kernel has no subshells (ipykernel 7 and later have them)")
    return subshell


def _rows(text: str) -> dict[int, str]:
    return {int(line.split()[0]): line for line in text.splitlines()[1:] if line.strip()}


def test_where_in_a_subshell_while_a_pool_cell_runs(kernel: Kernel) -> None:
    subshell = _subshell(kernel)
    long = kernel.submit(
        "%%nbaccel\n"
        "import time, torch, torch.distributed as dist\n"
        "if rank == 1:\n"
        "    time.sleep(6)\n"
        "dist.all_reduce(torch.ones(3))\n"
    )
    time.sleep(3.0)
    asked = time.monotonic()
    cell, text, html = _shown(kernel, "%nbaccel where", subshell)
    assert cell.status == "ok", cell.describe()
    assert time.monotonic() - asked < 10 and not long.idle, "the answer waited for the cell"
    count = re.search(r"In \[(\d+)\]", text)
    assert count is not None, text
    cell_name = f"In [{count.group(1)}]"
    rows = _rows(text)
    # lines count from the first line under %%nbaccel, as the pool's tracebacks do
    assert f"{cell_name}, line 4" in rows[0] and "all_reduce #1 float32[3]" in rows[0], text
    assert f"{cell_name}, line 3" in rows[1] and "time.sleep(6)" in rows[1], text
    assert "<table>" in html and "all_reduce #1" in html
    done = kernel.collect(long, timeout=60)
    assert done.status == "ok", done.describe()
    assert f"In [{done.execution_count}]" == cell_name


def test_where_in_a_subshell_while_a_launch_runs(kernel: Kernel) -> None:
    subshell = _subshell(kernel)
    defined = kernel.ok(
        """
        def waits_for_rank_1():
            import time, torch, torch.distributed as dist
            from nbaccel import PartialState
            if PartialState().process_index == 1:
                time.sleep(6)
            dist.all_reduce(torch.ones(2))
            return 1
        """
    ).execution_count
    launch = kernel.submit("notebook_launcher(waits_for_rank_1, num_processes=2, cpu=True)")
    time.sleep(3.5)
    cell, text, _ = _shown(kernel, "%nbaccel where", subshell)
    assert cell.status == "ok", cell.describe()
    rows = _rows(text)
    assert f"In [{defined}], line 6" in rows[0] and "all_reduce #1" in rows[0], text
    assert f"In [{defined}], line 5" in rows[1] and "time.sleep(6)" in rows[1], text
    assert kernel.collect(launch, timeout=60).status == "ok"


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_stall_is_shown_in_the_launching_cell_with_the_notebook_line(
    kernel: Kernel, method: str
) -> None:
    defined = kernel.ok(
        """
        def late_rank_1():
            import time, torch, torch.distributed as dist
            from nbaccel import PartialState
            if PartialState().process_index == 1:
                time.sleep(6)
            dist.all_reduce(torch.ones(2))
            return 1
        """
    ).execution_count
    cell = kernel.execute(
        f"notebook_launcher(late_rank_1, num_processes=2, cpu=True, start_method={method!r}, "
        "stall_timeout=2)",
        timeout=90,
    )
    assert cell.status == "ok", cell.describe()
    err = cell.stderr
    assert "nbaccel: a collective stalled: rank 0 has waited" in err, cell.describe()
    assert (
        f"in all_reduce (#1, In [{defined}], line 6), and rank 1 never joined it: rank 1 is "
        f"at In [{defined}], line 5, in late_rank_1: time.sleep(6)"
    ) in err, cell.describe()
    assert "The run goes on" in err


def test_an_interrupt_whose_grace_runs_out_names_the_ranks_left_and_their_lines(
    kernel: Kernel,
) -> None:
    """Rank 1 ignores SIGTERM (a handler of the user's): the interrupt's ``KeyboardInterrupt``
    says rank 1 did not stop within the grace period, with the table of where every rank was;
    rank 1 is killed and nothing is left."""
    defined = kernel.ok(
        """
        def ignores_sigterm():
            import signal, time
            from nbaccel import PartialState
            if PartialState().process_index == 1:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            print("running", flush=True)
            time.sleep(600)
        """
    ).execution_count
    launch = kernel.submit(
        "try:\n"
        "    notebook_launcher(ignores_sigterm, num_processes=2, cpu=True)\n"
        "except KeyboardInterrupt as exc:\n"
        "    said = str(exc)\n"
    )
    seen: list[bool] = []

    def interrupt_once_rank_1_runs(message: dict[str, Any], cell: Cell) -> None:
        text = message["content"].get("text", "") if message["msg_type"] == "stream" else ""
        if not seen and "[rank1]: running" in text:
            seen.append(True)
            time.sleep(0.5)
            kernel.interrupt()

    done = kernel.collect(launch, timeout=90, on_message=interrupt_once_rank_1_runs)
    assert seen and done.status == "ok", done.describe()
    text = kernel.ok("print(said)").stdout
    assert "rank(s) [1] did not stop within 2s of the interrupt" in text, text
    rows = _rows(text.split("Where every rank was then:\n")[1])
    assert f"In [{defined}], line 7" in rows[1] and "time.sleep(600)" in rows[1], text
    assert "exited" in rows[0] or "no answer" in rows[0], text
