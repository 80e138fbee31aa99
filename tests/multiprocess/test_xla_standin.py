"""The TPU path, through a stand-in torch_xla package (no TPU or torch_xla build here).

The stand-in in tests/fixtures/fake_torch_xla records every call nbaccel makes and forks
four CPU "cores"; what is asserted is nbaccel's side: which spawn it calls with which
arguments, that the workers' state reports DistributedType.XLA, and that torch_xla is never
imported when no TPU is requested.

The xla tier (tests/xla) runs the real torch_xla on one CPU device. What stays here is what
one device cannot show: several cores (ranks, rendezvous, one failing core among four), a
TPU's own settings (its banner, XLA_USE_BF16, Colab's COLAB_TPU_ADDR) and a whole launch off
TPU with torch_xla importable (the xla tier checks the state classes only, without a launch).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess

FAKE = Path(__file__).resolve().parents[1] / "fixtures" / "fake_torch_xla"

SCRIPT = """
import os, sys, json
from nbaccel import notebook_launcher, PartialState
from nbaccel.utils import DistributedType

def work(scale):
    state = PartialState()
    state.wait_for_everyone()
    if "{fail}" == "yes" and state.process_index == 2:
        raise KeyError("core 2 failed")
    return [str(state.distributed_type), state.distributed_type == DistributedType.TPU,
            state.process_index, state.num_processes, str(state.device), scale,
            state.mixed_precision, os.environ.get("XLA_USE_BF16")]

out = notebook_launcher(work, (7,), mixed_precision="bf16")
print("RESULT " + json.dumps(out))
print("XLA_IMPORTED", "torch_xla" in sys.modules)
"""


def _run(
    tmp_path: Path, tpu: bool, fail: bool = False, variable: str = "PJRT_DEVICE"
) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    log = tmp_path / "calls.jsonl"
    env = dict(os.environ, PYTHONPATH=f"{FAKE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    env["FAKE_TORCH_XLA_LOG"] = str(log)
    for name in ("PJRT_DEVICE", "TPU_NAME", "COLAB_TPU_ADDR", "TPU_ACCELERATOR_TYPE"):
        env.pop(name, None)
    if tpu:  # PJRT_DEVICE=TPU (TPU VMs, Kaggle) or the address Colab's TPU runtimes set
        env[variable] = "TPU" if variable == "PJRT_DEVICE" else "10.0.0.2:8470"
    code = SCRIPT.replace("{fail}", "yes" if fail else "no")
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, calls


@pytest.mark.parametrize("variable", ["PJRT_DEVICE", "COLAB_TPU_ADDR"])
def test_tpu_launch_goes_through_xla_spawn_and_workers_see_xla(
    tmp_path: Path, variable: str
) -> None:
    proc, calls = _run(tmp_path, tpu=True, variable=variable)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    results = json.loads(line[len("RESULT ") :])
    assert [r[2] for r in results] == [0, 1, 2, 3]
    for index, (kind, is_tpu, rank, world, device, scale, precision, bf16) in enumerate(results):
        assert (kind, is_tpu, rank, world, scale, precision) == ("XLA", True, index, 4, 7, "bf16")
        assert bf16 == "1"  # bf16 on a TPU: XLA_USE_BF16 for the cores, as Accelerate sets it
        assert device == "cpu"  # the stand-in's "XLA device"
    spawns = [c for c in calls if c["call"] == "spawn"]
    assert len(spawns) == 1
    assert spawns[0]["start_method"] == "fork" and spawns[0]["nprocs"] is None
    assert sum(c["call"] == "rendezvous" for c in calls) == 4  # wait_for_everyone on 4 cores
    assert "Launching on the XLA device (TPU, every core of this host)" in proc.stdout


def test_failing_tpu_core_raises_its_own_exception(tmp_path: Path) -> None:
    proc, _ = _run(tmp_path, tpu=True, fail=True)
    assert proc.returncode != 0
    assert "KeyError" in proc.stderr and "core 2 failed" in proc.stderr
    assert "rank 2 failed" in proc.stderr


def test_off_tpu_torch_xla_is_never_imported(tmp_path: Path) -> None:
    proc, calls = _run(tmp_path, tpu=False)
    assert proc.returncode == 0, proc.stderr
    assert "XLA_IMPORTED False" in proc.stdout
    assert calls == []
