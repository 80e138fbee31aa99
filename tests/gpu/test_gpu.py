"""What one GPU can check in plain processes: device and backend choice, bf16/fp16 training
against fp32, FSDP2 with bf16 and with CPU offload, checkpoints of GPU tensors with exact resume,
the launch banner, free_memory, and the GPT bf16 benchmark's subjects (test_gpu_kernel.py has
the checks in a real Jupyter kernel)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nbaccel.environment import cuda_device_count
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
    found = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"\n{name}: {json.dumps(found)}")  # the figures, in the GPU run's log (pytest -s)
    return found


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


def test_save_state_and_load_state_of_gpu_tensors_resume_exactly() -> None:
    found = _run("checkpoint")
    assert found["weights_equal"] and found["moments_equal"], found
    assert found["weights_devices"] == ["cuda:0"] and found["moments_devices"] == ["cuda:0"]
    assert found["resumed_losses"] == found["uninterrupted_losses"], found  # bit for bit


def test_the_launch_banner_names_the_gpu() -> None:
    found = _run("banner")
    assert found["name"] in found["banner"], found
    assert "(nccl)" in found["banner"], found


def test_free_memory_releases_cuda_memory_to_the_driver() -> None:
    found = _run("free_memory")
    assert found["used"] > 4 * 4096 * 4096 * 4  # weights, gradients and Adam's moments
    assert found["held"] > 0.9 * found["used"], found  # kept alive by the Accelerator alone
    assert found["after"] < 0.01 * found["used"], found
    assert found["reserved_after"] < 0.2 * found["reserved_before"], found  # cache emptied
    # the driver has the memory back: free device memory grew by about what was used
    assert found["driver_free_after"] - found["driver_free_before"] > 0.9 * found["used"], found
    assert found["returned"] == [None, None]  # model, optimizer = free_memory(model, optimizer)
    assert found["after_returned"] < 0.01 * found["used"], found


@pytest.mark.skipif(cuda_device_count() < 2, reason="needs two GPUs (one NCCL rank each)")
def test_two_ranks_on_two_gpus_over_nccl_train_as_one_process() -> None:
    found = _run("two_gpus")
    assert found["devices"] == ["cuda:0", "cuda:1"], found
    assert found["backends"] == ["nccl", "nccl"], found
    assert found["largest_gap"] < 1e-5, found


def test_the_gpt_bf16_benchmark_runs_every_subject_on_the_gpu() -> None:
    from benchmarks.gpt_bf16 import measure
    from benchmarks.gpt_model import GPTConfig

    config = GPTConfig(layers=2, heads=4, width=256, sequence=256, vocab=8192, batch_size=8,
                       warmup_steps=2, steps=5, reps=1)  # fmt: skip
    subjects = ("hand_written", "nbaccel", "accelerate")
    result = measure(config, None, subjects)
    assert result["ran"] and result["device"] != "cpu", result
    for subject in subjects:
        item = result["subjects"][subject]
        assert item["tokens_per_s"]["median"] > 0, item
        assert item["mfu"] is not None and 0 < item["mfu"] < 1, (result["device"], item)
        assert item["max_memory_gib"] > 0, item
    assert result["breakdown"]["forward_backward_s"] > 0, result["breakdown"]


def test_the_compiled_gpt_benchmark_trains_the_same_model_in_every_subject() -> None:
    """``--gpt_compile``: the hand-written loop under ``torch.compile`` and both Accelerators
    with inductor (``dynamo_backend`` and ``TorchDynamoPlugin``) train the same model (the
    first losses agree: checked inside ``measure``), and the first step, which compiles, is
    timed apart."""
    from benchmarks.gpt_bf16 import COMPILED_SUBJECTS, measure
    from benchmarks.gpt_model import GPTConfig

    config = GPTConfig(layers=2, heads=4, width=256, sequence=256, vocab=8192, batch_size=8,
                       warmup_steps=2, steps=5, reps=1, compiled=True)  # fmt: skip
    result = measure(config, None, COMPILED_SUBJECTS)
    for subject in COMPILED_SUBJECTS:
        item = result["subjects"][subject]
        assert item["label"].endswith(" + inductor"), item
        assert item["first_step_s"] > item["step_s"]["median"], item  # it compiled first
        assert item["tokens_per_s"]["median"] > 0, item
