"""debug_launcher runs beside the caller's state and keeps it; notebook_launcher refuses."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from nbaccel import Accelerator, GradientState, PartialState, debug_launcher, notebook_launcher

pytestmark = pytest.mark.multiprocess


def _fresh_state_report() -> dict[str, Any]:
    """What the launched function sees: its own state, not the caller's."""
    accelerator = Accelerator()  # the caller's has gradient_accumulation_steps=3
    return {
        "num_processes": accelerator.num_processes,
        "process_index": accelerator.process_index,
        "num_steps": GradientState().num_steps,
        "total": accelerator.reduce(torch.tensor([accelerator.process_index + 1.0]), "sum").item(),
    }


@pytest.mark.parametrize("processes", [1, 2])
def test_debug_launcher_runs_beside_the_callers_state(processes: int) -> None:
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=3)
    results = debug_launcher(_fresh_state_report, num_processes=processes)
    assert [r["process_index"] for r in results] == list(range(processes))
    for result in results:
        assert result["num_processes"] == processes
        assert result["num_steps"] == 1
        assert result["total"] == sum(range(1, processes + 1))
    # the caller's state is as it was
    assert accelerator.state.num_processes == 1
    assert accelerator.gradient_accumulation_steps == 3
    assert GradientState().num_steps == 3
    assert PartialState._shared_state["_cpu"] is True


def test_notebook_launcher_still_refuses_a_kernel_that_holds_an_accelerator() -> None:
    Accelerator(cpu=True)
    with pytest.raises(ValueError, match="already exists in this kernel"):
        notebook_launcher(_fresh_state_report, num_processes=2, cpu=True)
