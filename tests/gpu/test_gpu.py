"""What one GPU can check: device and backend choice, the CUDA fork guard and spawn in a real
kernel, bf16/fp16 training against fp32, FSDP2 with bf16 and with CPU offload, checkpoints of
GPU tensors, the launch banner, free_memory, and the GPT bf16 benchmark's tokens/s and MFU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import pythonpath

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _run(name: str) -> dict[str, Any]:
    """Run one check of gpu_checks.py in a fresh interpreter; its JSON result."""
    done = subprocess.run(
        [sys.executable, str(HERE / "gpu_checks.py"), name],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=pythonpath()),  # the script imports tests.support
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_partial_state_picks_cuda_0_and_nccl() -> None:
    found = _run("partial_state")
    assert found["device"] == "cuda:0"
    assert found["backend"] is None  # one process: no process group
    assert found["launched_device"] == "cuda:0" and found["launched_backend"] == "nccl"
    assert found["nccl_all_reduce"] == [1.0, 1.0, 1.0, 1.0]


def _close(a: list[float], b: list[float], tolerance: float) -> bool:
    return max(abs(x - y) for x, y in zip(a, b, strict=True)) <= tolerance


def test_bf16_and_fp16_train_on_cuda_and_match_fp32() -> None:
    runs = _run("mixed_precision")
    reference = runs["no"]
    assert reference["device"] == "cuda:0" and reference["scaler"] is None
    assert reference["losses"][-1] < 0.5 * reference["losses"][0]
    for precision in ("bf16", "fp16"):
        run = runs[precision]
        last, ref_last = sum(run["losses"][-5:]) / 5, sum(reference["losses"][-5:]) / 5
        assert abs(last - ref_last) <= 0.25 * ref_last + 0.05, (precision, last, ref_last)
        for mine, theirs in zip(run["weights"], reference["weights"], strict=True):
            assert _close(mine, theirs, 0.1), precision
    assert runs["bf16"]["scaler"] is None
    fp16 = runs["fp16"]
    assert fp16["scaler"] == "GradScaler"
    assert fp16["skipped"] is True and fp16["unchanged"] is True  # the overflowing step
    assert fp16["scale_after"] < fp16["scale_before"]


def test_fsdp2_at_world_size_1_with_bf16_and_with_cpu_offload() -> None:
    runs = _run("fsdp2")
    for name, device in (("gpu", "cuda:0"), ("offload", "cpu")):
        run = runs[name]
        assert run["device"] == "cuda:0", name
        assert run["compute_dtype"] == "torch.bfloat16", name
        assert run["parameter_type"] == "DTensor", name
        assert run["parameter_device"].startswith(device.split(":")[0]), (name, run)
        assert run["parameter_dtype"] == "torch.float32", name  # sharded params stay fp32
        assert run["losses"][-1] < 0.5 * run["losses"][0], (name, run["losses"])


def test_save_state_and_load_state_of_gpu_tensors() -> None:
    found = _run("checkpoint")
    assert found["weights_equal"] and found["moments_equal"], found
    assert found["weights_devices"] == ["cuda:0"] and found["moments_devices"] == ["cuda:0"]


def test_the_launch_banner_names_the_gpu() -> None:
    found = _run("banner")
    assert found["name"] in found["banner"], found
    assert "(nccl)" in found["banner"], found


def test_free_memory_releases_cuda_memory() -> None:
    found = _run("free_memory")
    assert found["returned"] == [None, None]
    assert found["before"] > 4 * 4096 * 4096 * 4  # weights, gradients and Adam's moments
    assert found["after"] < 0.05 * found["before"], found


def test_fork_after_cuda_init_is_refused_naming_the_line_and_spawn_works() -> None:
    """In a real Jupyter kernel: CUDA initialised by a cell, then fork is refused naming that
    cell's line, and spawn starts workers that use the GPU."""
    pytest.importorskip("jupyter_client")
    from tests.support.kernel import running_kernel

    with running_kernel() as kernel:
        kernel.ok("import torch\nfrom nbaccel import notebook_launcher")
        touch = kernel.ok("x = 1\ny = torch.ones(1, device='cuda')")
        refused = kernel.execute(
            "def where():\n"
            "    import torch\n"
            "    from nbaccel import PartialState\n"
            "    return PartialState().process_index, torch.ones(1, device='cuda').item()\n"
            "notebook_launcher(where, num_processes=2, cpu=True, start_method='fork')",
            timeout=60,
        )
        assert refused.ename == "CudaInitializedError", refused.describe()
        assert f"In [{touch.execution_count}], line 2" in refused.error_text, refused.describe()
        assert 'start_method="spawn"' in refused.error_text
        spawned = kernel.ok(
            "print(notebook_launcher(where, num_processes=2, cpu=True))", timeout=180
        )
    assert "with spawn" in spawned.stdout, spawned.describe()
    assert spawned.lines()[-1] == "[(0, 1.0), (1, 1.0)]", spawned.describe()


def test_the_scaling_benchmarks_gpt_bf16_part_reports_tokens_per_second_and_mfu() -> None:
    from benchmarks.gpt_bf16 import GPTConfig, measure

    config = GPTConfig(layers=2, heads=4, width=256, sequence=256, vocab=8192, batch_size=8,
                       warmup_steps=2, steps=5, reps=1)  # fmt: skip
    result = measure(config, None)
    assert result["ran"] and result["device"] != "cpu", result
    for subject in ("nbaccel", "hand_written"):
        item = result["subjects"][subject]
        assert item["tokens_per_s"]["median"] > 0, item
        assert item["mfu"] is not None and 0 < item["mfu"] < 1, (result["device"], item)
