"""Transformers' Trainer with ``TrainingArguments(deepspeed=...)`` under nbaccel's launcher:
the Trainer builds its engine through Accelerate's own DeepSpeed integration, in 2 real gloo
ranks that see the launch's world size."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbaccel import notebook_launcher
from nbaccel.examples.trainer import train_with_trainer

pytest.importorskip("transformers")
pytest.importorskip("deepspeed")

pytestmark = pytest.mark.multiprocess

ZERO3 = {
    "train_micro_batch_size_per_gpu": "auto",
    "train_batch_size": "auto",
    "gradient_accumulation_steps": "auto",
    "zero_optimization": {"stage": 3},
}


def test_the_trainer_runs_zero3_on_every_rank(tmp_path: Path) -> None:
    results = notebook_launcher(
        train_with_trainer,
        (str(tmp_path), 1.0),
        kwargs={"deepspeed": ZERO3},
        num_processes=2,
        cpu=True,
        timeout=300,
    )
    for rank, result in enumerate(results):
        assert result["rank"] == rank and result["world_size"] == 2, result
        assert result["wrapped_as"] == "DeepSpeedEngine", result
    assert results[0]["eval_accuracy"] == results[1]["eval_accuracy"] > 0.3, results
