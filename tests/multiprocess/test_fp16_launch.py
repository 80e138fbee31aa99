"""``notebook_launcher(..., mixed_precision="fp16")`` on CPU ranks, as Hugging Face's example
notebooks call it: the warning once, in the notebook's process, and 2 real gloo ranks that
report ``"fp16"`` (as Accelerate does) while they train in fp32."""

from __future__ import annotations

import warnings

import fp16_ranks
import pytest

from nbaccel import notebook_launcher
from nbaccel.environment import fp16_fallback_warning

pytestmark = pytest.mark.multiprocess

WARNING = fp16_fallback_warning("cpu")
FP32 = {
    "reported": "fp16",
    "state_reported": "fp16",
    "autocast_on": False,
    "computed": ["torch.float32"],
    "output": "torch.float32",
    "parameters": ["torch.float32"],
    "scaler": False,
    "skipped": False,
}


def _fallbacks(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in caught if "runs in full precision" in str(w.message)]


def test_the_launchers_fp16_warns_once_in_the_notebook_and_the_ranks_train_in_fp32(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = notebook_launcher(
            fp16_ranks.record, num_processes=2, mixed_precision="fp16", cpu=True, timeout=120
        )
    notebook = _fallbacks(caught)
    assert [str(w.message) for w in notebook] == [WARNING]
    assert notebook[0].filename == __file__  # points at the notebook_launcher call
    assert [r["rank"] for r in results] == [0, 1]
    for seen in results:
        assert seen["warnings"] == []  # told by the launcher: no rank repeats it
        assert {k: seen[k] for k in FP32} == FP32
    out, err = capfd.readouterr()
    assert "runs in full precision" not in out + err  # nothing relayed from the ranks either
    assert "mixed precision fp16 (trains in fp32 on the CPU)" in out + err  # the banner


def test_fp16_asked_inside_the_function_warns_on_the_main_rank_only() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = notebook_launcher(fp16_ranks.record, ("fp16",), num_processes=2, cpu=True)
    assert _fallbacks(caught) == []  # the launcher was not asked for fp16
    assert [len(r["warnings"]) for r in results] == [1, 0]
    assert results[0]["warnings"] == [WARNING]
    for seen in results:
        assert {k: seen[k] for k in FP32} == FP32


def test_one_process_runs_in_this_process_and_the_warning_still_comes_once() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = notebook_launcher(
            fp16_ranks.record, num_processes=1, mixed_precision="fp16", cpu=True
        )
    assert [str(w.message) for w in _fallbacks(caught)] == [WARNING]
    assert results[0]["warnings"] == []
    assert {k: results[0][k] for k in FP32} == FP32


@pytest.mark.parametrize("version", [1, 2])
def test_fsdp_on_cpu_ranks_keeps_fp16_in_fp32_too(version: int) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = notebook_launcher(
            fp16_ranks.record_fsdp, (version,), num_processes=2, mixed_precision="fp16", cpu=True
        )
    assert len(_fallbacks(caught)) == 1
    for seen in results:
        assert seen["distributed_type"] == "FSDP" and seen["reported"] == "fp16"
        assert seen["policy_param_dtype"] == "torch.float32"  # not cast to fp16 by FSDP
        assert seen["computed"] == ["torch.float32"] and seen["output"] == "torch.float32"
