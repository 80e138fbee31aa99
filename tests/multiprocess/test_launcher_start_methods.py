"""fork and spawn run every kind of function a notebook defines; results come back in order."""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable
from typing import Any

import launcher_helpers as h
import pytest

from nbaccel import PartialState

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]

# Source of a notebook cell: run in a module of its own that cannot be imported by name.
CELL_SOURCE = """
import os
import time

import torch
import torch.distributed as dist

SCALE = 10.0  # a global of the cell: must travel with the function


def cell_function(offset):
    from nbaccel import PartialState

    state = PartialState()
    value = torch.tensor([SCALE * state.process_index + offset])
    dist.all_reduce(value)
    if state.local_process_index == 0:
        time.sleep(0.2)
    return {
        "kind": "cell",
        "rank": state.local_process_index,
        "sum": value.item(),
        "fork_launched": state.fork_launched,
        "ppid": os.getppid(),
    }
"""


def _cell_function(module_name: str) -> Callable[..., Any]:
    """``cell_function`` from CELL_SOURCE, defined in a fresh module that is not importable."""
    module = types.ModuleType(module_name)
    exec(compile(CELL_SOURCE, f"<{module_name}>", "exec"), module.__dict__)
    assert module_name == "__main__" or module_name not in sys.modules
    function = module.__dict__["cell_function"]
    assert function.__module__ == module_name
    return function


def _module_level(offset: float) -> dict[str, Any]:
    info = h.rank_info()
    return {
        "kind": "module",
        "rank": info["local_rank"],
        "sum": info["sum"] + 2 * offset,
        "fork_launched": info["fork_launched"],
        "ppid": info["ppid"],
    }


def _make_closure() -> Callable[[float], dict[str, Any]]:
    secret = {"scale": 3.0}  # a local variable of the enclosing function

    def closure(offset: float) -> dict[str, Any]:
        state = PartialState()
        info = h.rank_info()
        return {
            "kind": "closure",
            "rank": state.local_process_index,
            "sum": secret["scale"] * info["sum"] + 2 * offset,
            "fork_launched": state.fork_launched,
            "ppid": info["ppid"],
        }

    return closure


def _make_lambda() -> Callable[[float], dict[str, Any]]:
    return lambda offset: {**_module_level(offset), "kind": "lambda"}


# kind -> (the function, the all_reduce result expected on 2 ranks for offset=1)
KINDS: dict[str, Callable[[], tuple[Callable[..., Any], float]]] = {
    "module": lambda: (_module_level, 1.0 + 2.0),
    "lambda": lambda: (_make_lambda(), 1.0 + 2.0),
    "closure": lambda: (_make_closure(), 3.0 + 2.0),
    "dynamic-module": lambda: (_cell_function("nbaccel_test_cell_module"), 10.0 + 2.0),
    "main-module": lambda: (_cell_function("__main__"), 10.0 + 2.0),
}
EXPECTED_KIND = {"dynamic-module": "cell", "main-module": "cell"}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_launcher_start_method_runs_function_kind(method: str, kind: str) -> None:
    function, expected_sum = KINDS[kind]()
    before = h.child_pids()
    results = h.launch(function, 1.0, start_method=method)
    assert [r["rank"] for r in results] == [0, 1], "results not in local-rank order"
    assert [r["kind"] for r in results] == [EXPECTED_KIND.get(kind, kind)] * 2
    assert [r["sum"] for r in results] == [expected_sum, expected_sum]
    assert all(r["fork_launched"] is (method == "fork") for r in results)
    assert all(r["ppid"] == os.getpid() for r in results)
    assert not h.wait_no_children(before)


def test_launcher_auto_start_method_picks_fork_here(capsys: pytest.CaptureFixture[str]) -> None:
    results = h.launch(h.rank_info, start_method="auto")
    assert [r["fork_launched"] for r in results] == [True, True]
    assert "with fork" in capsys.readouterr().out


def test_launcher_spawn_reports_state_as_not_forked() -> None:
    results = h.launch(h.rank_info, start_method="spawn")
    assert [(r["rank"], r["fork_launched"]) for r in results] == [(0, False), (1, False)]
    assert len({r["pid"] for r in results}) == 2


def test_launcher_results_in_local_rank_order_with_three_ranks() -> None:
    results = h.launch(h.rank_info, num_processes=3)
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert [r["sum"] for r in results] == [3.0, 3.0, 3.0]
    assert all(r["world"] == 3 for r in results)
