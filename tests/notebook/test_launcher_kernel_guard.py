"""notebook_launcher and CUDA in a real kernel: it never initialises CUDA, and it refuses to fork
(naming the cell and line) once CUDA is initialised, while spawn still works."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from tests.support.kernel import Kernel, running_kernel

pytestmark = pytest.mark.notebook


@pytest.fixture(scope="module")
def kernel() -> Iterator[Kernel]:
    """One kernel for the module, with torch and nbaccel imported; always shut down."""
    with running_kernel() as kernel:
        kernel.ok(
            """
            import os
            import torch
            from nbaccel import notebook_launcher
            from nbaccel.launch.guard import CudaInitializedError
            """
        )
        yield kernel


def test_fork_launch_never_initialises_cuda(kernel: Kernel) -> None:
    kernel.ok(
        """
        import sys, traceback
        _cuda_touches = []
        _saved_lazy_inits = {}

        def _forbidden_lazy_init(*args, **kwargs):
            _cuda_touches.append("".join(traceback.format_stack()))
            raise RuntimeError("the launcher initialised CUDA")

        for _name, _module in list(sys.modules.items()):
            if _name == "torch.cuda" or _name.startswith("torch.cuda."):
                if callable(vars(_module).get("_lazy_init")):
                    _saved_lazy_inits[_name] = vars(_module)["_lazy_init"]
                    vars(_module)["_lazy_init"] = _forbidden_lazy_init
        assert "torch.cuda" in _saved_lazy_inits
        """
    )
    try:
        cell = kernel.ok(
            """
            result = notebook_launcher(
                lambda: int(os.environ["RANK"]) * 3, num_processes=2, start_method="fork"
            )
            print("RESULT", result, len(_cuda_touches), torch.cuda.is_initialized())
            """
        )
    finally:
        kernel.ok(
            """
            for _name, _original in _saved_lazy_inits.items():
                vars(sys.modules[_name])["_lazy_init"] = _original
            """
        )
    assert "RESULT [0, 3] 0 False" in cell.stdout, cell.describe()
    assert kernel.value("_cuda_touches") == "[]"


def test_guard_names_the_cell_and_auto_falls_back_to_spawn(kernel: Kernel, tmp_path: Path) -> None:
    touch = kernel.ok(
        """\
        x = 1
        try:
            torch.cuda._lazy_init()  # the recording hook sees this line
        except (AssertionError, RuntimeError) as error:
            print("torch said:", error)
        """
    )
    assert "torch said:" in touch.stdout
    marker = tmp_path / "a-worker-ran"
    kernel.ok(
        f"""
        def touch_marker(path={str(marker)!r}):
            open(path + os.environ["RANK"], "w").close()
            return int(os.environ["RANK"])

        _saved_is_initialized = torch.cuda.is_initialized
        torch.cuda.is_initialized = lambda: True  # stand-in: there is no GPU here
        """
    )
    try:
        refused = kernel.execute(
            'notebook_launcher(touch_marker, num_processes=2, start_method="fork", debug=True)'
        )
        kernel_children = psutil.Process(kernel.pid).children(recursive=True)
        markers_after_refusal = list(tmp_path.iterdir())
        auto = kernel.execute(
            'print("RESULT", notebook_launcher(touch_marker, num_processes=2, debug=True))'
        )
    finally:
        kernel.ok("torch.cuda.is_initialized = _saved_is_initialized")

    assert refused.status == "error", refused.describe()
    assert refused.ename == "CudaInitializedError", refused.describe()
    site = f"notebook cell In [{touch.execution_count}], line 3: torch.cuda._lazy_init()"
    assert site in refused.evalue, refused.describe()
    assert 'start_method="spawn"' in refused.evalue
    assert "nothing was started" in refused.evalue
    # No worker was started: no banner, no marker file, no child process of the kernel.
    assert refused.banner_methods() == [], refused.describe()
    assert "Launching" not in refused.stdout
    assert markers_after_refusal == []
    assert kernel_children == []

    assert auto.status == "ok", auto.describe()
    assert auto.banner_methods() == ["spawn"], auto.describe()
    assert "RESULT [0, 1]" in auto.stdout, auto.describe()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-worker-ran0", "a-worker-ran1"]
    assert kernel.value("torch.cuda.is_initialized()") == "False"
