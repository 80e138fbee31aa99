"""The CUDA guard in a real Jupyter kernel: the init site is named by notebook cell and line."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from jupyter_client.blocking.client import BlockingKernelClient  # noqa: E402
from jupyter_client.manager import KernelManager  # noqa: E402

from tests.support.kernel import KERNEL_NAME  # noqa: E402

pytestmark = pytest.mark.notebook

_TIMEOUT = 30.0


@dataclass
class CellResult:
    """What one executed cell produced."""

    execution_count: int
    status: str
    stdout: str = ""
    errors: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def kernel() -> Iterator[BlockingKernelClient]:
    """A real IPython kernel (this interpreter, through ipykernel_launcher), always shut down."""
    # jupyter_client runs a spec whose command is `python` on sys.executable, and falls back to
    # ipykernel's built-in spec when no python3 kernelspec is installed.
    manager = KernelManager(kernel_name=KERNEL_NAME)
    manager.start_kernel(env=_kernel_env())
    client = manager.client()
    try:
        client.start_channels()
        client.wait_for_ready(timeout=60)
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def _kernel_env() -> dict[str, str]:
    env = dict(os.environ)
    # The kernel must not be in debug mode on its own: the test asks for it explicitly.
    env.pop("NBACCEL_DEBUG_MODE", None)
    env.pop("ACCELERATE_DEBUG_MODE", None)
    env.pop("IPYKERNEL_CELL_NAME", None)
    return env


def _run(client: BlockingKernelClient, code: str) -> CellResult:
    outputs: list[str] = []
    errors: list[str] = []

    def collect(message: dict[str, Any]) -> None:
        kind, content = message["msg_type"], message["content"]
        if kind == "stream" and content.get("name") == "stdout":
            outputs.append(content["text"])
        elif kind == "error":
            errors.append(f"{content['ename']}: {content['evalue']}")

    reply = client.execute_interactive(textwrap.dedent(code), timeout=_TIMEOUT, output_hook=collect)
    content = reply["content"]
    return CellResult(content["execution_count"], content["status"], "".join(outputs), errors)


def test_kernel_cell_is_named_as_init_site(kernel: BlockingKernelClient) -> None:
    setup = _run(
        kernel,
        """
        import torch
        from nbaccel.launch.guard import install_cuda_init_tracer, cuda_init_site
        from nbaccel.launch.guard import check_fork_safe, CudaInitializedError
        install_cuda_init_tracer()
        print(cuda_init_site())
        """,
    )
    assert setup.status == "ok", setup.errors
    assert setup.stdout.strip() == "None"

    touch = _run(
        kernel,
        """\
        x = 1
        y = x + 1
        try:
            torch.cuda._lazy_init()
        except (AssertionError, RuntimeError) as error:
            print("torch said:", error)
        """,
    )
    assert touch.status == "ok", touch.errors
    assert "torch said:" in touch.stdout  # the CPU build refused, yet the site is recorded
    assert touch.execution_count == setup.execution_count + 1

    report = _run(kernel, "print(cuda_init_site().describe())")
    assert report.status == "ok", report.errors
    expected = f"notebook cell In [{touch.execution_count}], line 4: torch.cuda._lazy_init()"
    assert report.stdout.strip() == expected

    guarded = _run(
        kernel,
        """
        torch.cuda.is_initialized = lambda: True  # stand-in: there is no GPU on this machine
        try:
            check_fork_safe(debug=True)
        except CudaInitializedError as error:
            print(error)
        else:
            print("NOT RAISED")
        """,
    )
    assert guarded.status == "ok", guarded.errors
    assert "NOT RAISED" not in guarded.stdout
    assert expected in guarded.stdout
    assert 'start_method="spawn"' in guarded.stdout
    assert "Traceback of that initialisation" in guarded.stdout
    # The debug stack starts at the cell, not in the kernel's own machinery.
    stack = guarded.stdout.split("(most recent call last):\n", 1)[1]
    assert stack.startswith(f'  File "Cell In[{touch.execution_count}]", line 4, in <module>'), (
        stack
    )
    assert "ipykernel" not in stack and "asyncio" not in stack
