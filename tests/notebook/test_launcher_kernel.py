"""notebook_launcher in a real Jupyter kernel: notebook functions, live rank output, rank errors."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from tests.support.kernel import Cell, Kernel, running_kernel

pytestmark = pytest.mark.notebook

RESULT = "RESULT "
_PREFIX = re.compile(r"^\[rank(\d)\]: ")


@pytest.fixture(scope="module")
def kernel() -> Iterator[Kernel]:
    """One kernel for the module, with nbaccel imported; always shut down."""
    with running_kernel() as kernel:
        kernel.ok(
            """
            import ctypes, os, sys, time
            from nbaccel import notebook_launcher
            """
        )
        yield kernel


def _result(cell: Cell) -> Any:
    """The value the cell printed as ``RESULT <repr>`` (the launcher's return value)."""
    found = [line[len(RESULT) :] for line in cell.lines() if line.startswith(RESULT)]
    assert len(found) == 1, cell.describe()
    return ast.literal_eval(found[0])


def _launch(kernel: Kernel, call: str, timeout: float = 60.0) -> Cell:
    """Run ``print("RESULT", repr(<call>))`` in a cell that must succeed."""
    return kernel.ok(f"print({RESULT!r} + repr({call}))", timeout)


# -- (2) functions, lambdas and closures defined in the notebook -----------------------------


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_notebook_lambda_and_closure_return_per_rank_values(kernel: Kernel, method: str) -> None:
    kernel.ok(
        """
        OFFSET = 100
        rank_squared = lambda: int(os.environ["RANK"]) ** 2 + OFFSET

        def make_closure(scale):
            tag = f"scaled-{scale}"

            def scaled(extra):
                from nbaccel import PartialState

                state = PartialState()
                return (tag, state.process_index * scale + extra, state.num_processes)

            return scaled

        closure = make_closure(10)
        """
    )
    lam = _launch(
        kernel, f"notebook_launcher(rank_squared, num_processes=2, start_method={method!r})"
    )
    assert lam.banner_methods() == [method], lam.describe()
    assert _result(lam) == [100, 101]

    clo = _launch(
        kernel, f"notebook_launcher(closure, (7,), num_processes=2, start_method={method!r})"
    )
    assert _result(clo) == [("scaled-10", 7, 2), ("scaled-10", 17, 2)]


# -- (4) every rank's output reaches the cell as whole, prefixed lines -------------------------

_EMIT = r"""
def emit():
    rank = int(os.environ["RANK"])
    libc = ctypes.CDLL(None)
    c_stderr = ctypes.c_void_p.in_dll(libc, "stderr")
    print(f"py-out {rank}")
    print(f"py-err {rank}", file=sys.stderr)
    os.write(1, f"os-out {rank}\n".encode())
    os.write(2, f"os-err {rank}\n".encode())
    libc.printf(b"c-out %d\n", ctypes.c_int(rank))
    libc.fflush(None)
    libc.fprintf(c_stderr, b"c-err %d\n", ctypes.c_int(rank))
    libc.fflush(c_stderr)
    return rank
"""


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_print_oswrite_and_c_printf_reach_the_cell_prefixed(kernel: Kernel, method: str) -> None:
    kernel.ok(_EMIT)
    cell = _launch(kernel, f"notebook_launcher(emit, num_processes=2, start_method={method!r})")
    _assert_emitted(cell)


def test_spawned_workers_add_nothing_of_their_own_start_up_with_another_venv_active(
    tmp_path: Path,
) -> None:
    """A kernel whose interpreter is not the active virtual environment's (Jupyter started
    from one venv, the kernel from another): IPython warns about it at start-up, and a spawned
    worker's start-up must not bring that warning, or anything else, into the cell."""
    other = tmp_path / "other-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(other)], check=True)
    with running_kernel(VIRTUAL_ENV=str(other)) as kernel:
        kernel.ok("import ctypes, os, sys\nfrom nbaccel import notebook_launcher")
        kernel.ok(_EMIT)
        _assert_emitted(
            _launch(kernel, "notebook_launcher(emit, num_processes=2, start_method='spawn')")
        )


def _assert_emitted(cell: Cell) -> None:
    """``emit``'s six lines per rank, and nothing else, each once on its own stream."""
    assert _result(cell) == [0, 1]
    out = [line for line in cell.lines("stdout") if not line.startswith(RESULT)]
    err = cell.lines("stderr")
    expected_out = [f"[rank{r}]: {kind}-out {r}" for r in (0, 1) for kind in ("py", "os", "c")]
    expected_err = [f"[rank{r}]: {kind}-err {r}" for r in (0, 1) for kind in ("py", "os", "c")]
    # Every line exactly once, whole and prefixed; nothing unprefixed, nothing on the wrong stream.
    assert sorted(out) == sorted(expected_out), cell.describe()
    assert sorted(err) == sorted(expected_err), cell.describe()
    # Each rank's own lines keep their order.
    for rank in (0, 1):
        mine = [line for line in out if line.startswith(f"[rank{rank}]")]
        assert mine == [f"[rank{rank}]: {k}-out {rank}" for k in ("py", "os", "c")]


def test_output_arrives_while_the_cell_is_still_running(kernel: Kernel, tmp_path: Path) -> None:
    """Causal: rank 0 can only finish after the test has seen its line in the iopub stream."""
    release = tmp_path / "release"
    token = f"streamed-{tmp_path.name}"
    kernel.ok(
        f"""
        def wait_for_release(path={str(release)!r}, token={token!r}):
            if os.environ["RANK"] != "0":
                return True
            print(token)  # no flush: the worker's stdout must be line-buffered
            deadline = time.monotonic() + 30
            while not os.path.exists(path) and time.monotonic() < deadline:
                time.sleep(0.02)
            return os.path.exists(path)
        """
    )
    seen: list[Cell] = []

    def on_message(message: dict[str, Any], cell: Cell) -> None:
        if not seen and f"[rank0]: {token}\n" in cell.stdout:
            assert not cell.idle and RESULT not in cell.stdout
            seen.append(cell)
            release.touch()

    cell = kernel.submit(
        f"print({RESULT!r} + repr(notebook_launcher(wait_for_release, num_processes=2, "
        "start_method='fork')))"
    )
    kernel.collect(cell, timeout=60, on_message=on_message)
    assert cell.status == "ok", cell.describe()
    assert seen, f"the line never arrived while the cell ran:\n{cell.describe()}"
    assert _result(cell) == [True, True], "rank 0 was released only after the cell's end"


def test_two_ranks_writing_64k_lines_at_once_stay_whole(kernel: Kernel) -> None:
    kernel.ok(
        """
        def blast(start, count):
            rank = int(os.environ["RANK"])
            line = "ab"[rank] * 65536
            while time.time() < start:
                time.sleep(0.001)
            for i in range(count):
                if i % 2:
                    os.write(1, (line + "\\n").encode())
                else:
                    print(line)
            return count
        """
    )
    cell = _launch(
        kernel,
        "notebook_launcher(blast, (time.time() + 0.5, 6), num_processes=2, start_method='fork')",
    )
    assert _result(cell) == [6, 6]
    lines = [line for line in cell.lines() if not line.startswith(RESULT)]
    whole = {"[rank0]: " + "a" * 65536, "[rank1]: " + "b" * 65536}
    broken = [f"{line[:20]}... ({len(line)} chars)" for line in lines if line not in whole]
    assert not broken, broken
    assert sorted(lines) == sorted(
        ["[rank0]: " + "a" * 65536] * 6 + ["[rank1]: " + "b" * 65536] * 6
    )


def test_log_line_prefix_template_changes_the_prefix(kernel: Kernel) -> None:
    kernel.ok(
        """
        def hello():
            rank = int(os.environ["RANK"])
            print(f"hello from {rank}")
            print(f"warning from {rank}", file=sys.stderr)
            return rank
        """
    )
    cell = _launch(
        kernel,
        "notebook_launcher(hello, num_processes=2, start_method='fork', "
        "log_line_prefix_template='<${local_rank}> ')",
    )
    assert _result(cell) == [0, 1]
    out = [line for line in cell.lines() if not line.startswith(RESULT)]
    assert sorted(out) == ["<0> hello from 0", "<1> hello from 1"], cell.describe()
    assert sorted(cell.lines("stderr")) == ["<0> warning from 0", "<1> warning from 1"]


# -- (6) a failing rank ------------------------------------------------------------------------


def test_failing_rank_raises_original_type_in_the_cell(kernel: Kernel) -> None:
    kernel.ok(
        """
        def fail_on_one():
            if os.environ["RANK"] == "1":
                raise ValueError("bad value 42")
            time.sleep(60)  # must be stopped by the launcher, not waited for
            return 0
        """
    )
    cell = kernel.execute(
        "notebook_launcher(fail_on_one, num_processes=2, start_method='fork')", timeout=30
    )
    assert cell.status == "error", cell.describe()
    assert cell.ename == "ValueError" and cell.reply_ename == "ValueError", cell.describe()
    assert cell.evalue == "bad value 42"
    text = cell.error_text
    assert "WorkerError: rank 1 failed: ValueError: bad value 42" in text, text
    assert "Traceback on rank 1:" in text and 'raise ValueError("bad value 42")' in text, text
    assert "rank   0 (local 0): stopped by the launcher" in text, text


def test_notebook_defined_exception_is_catchable_with_fork(kernel: Kernel) -> None:
    cell = kernel.ok(
        """
        class NotebookError(Exception):
            pass

        def raise_notebook_error():
            if os.environ["RANK"] == "1":
                raise NotebookError("from rank 1")
            return 0

        try:
            notebook_launcher(raise_notebook_error, num_processes=2, start_method="fork")
        except NotebookError as error:
            print("caught", error)
        except Exception as error:
            print("missed", type(error).__name__, type(error) is NotebookError)
        """
    )
    assert "caught from rank 1" in cell.stdout, cell.describe()
