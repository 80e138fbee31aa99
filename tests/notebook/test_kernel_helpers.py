"""The kernel harness itself: what it sends decides what the kernel runs."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from tests.support.kernel import running_kernel

pytestmark = pytest.mark.notebook


def test_a_failing_cell_aborts_the_next_only_when_sent_with_stop_on_error() -> None:
    """The cause of cells that ipykernel 6 (Colab's) aborted right after a failing cell: a
    request sent with the protocol's ``stop_on_error`` makes the kernel abort what arrives next;
    ``Kernel.execute`` sends its cells without it, so a test's next cell always runs."""
    with running_kernel() as kernel:
        failing = kernel.submit("raise ValueError('on purpose')", stop_on_error=True)
        queued = kernel.submit("print('ran')")
        assert kernel.collect(failing).status == "error"
        assert kernel.collect(queued).status == "aborted"
        # ipykernel 6 goes on aborting for a moment after that reply (the window Kernel.ok
        # retries past); what is checked next is the flag, not that window
        time.sleep(1.0)
        failing = kernel.submit("raise ValueError('on purpose')", stop_on_error=False)
        queued = kernel.submit("print('ran')")
        assert kernel.collect(failing).status == "error"
        ran = kernel.collect(queued)
        assert ran.status == "ok" and ran.stdout == "ran\n", ran.describe()
        assert kernel.execute("raise KeyError('again')").status == "error"
        assert kernel.execute("print('next')").stdout == "next\n"
