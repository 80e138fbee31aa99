"""Transformers' Trainer with ``TrainingArguments(deepspeed=...)`` under nbaccel's launcher:
the Trainer builds its engine through Accelerate's own DeepSpeed integration, in 2 real gloo
ranks that see the launch's world size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nbaccel import notebook_launcher

pytest.importorskip("transformers")
pytest.importorskip("deepspeed")

pytestmark = pytest.mark.multiprocess


def _train(output_dir: str, stage: int) -> dict[str, Any]:
    from transformers import Trainer, TrainingArguments

    from nbaccel.examples.trainer import accuracy, digit_images, tiny_classifier

    train_set, eval_set = digit_images()
    config = {
        "train_micro_batch_size_per_gpu": "auto",
        "train_batch_size": "auto",
        "gradient_accumulation_steps": "auto",
        "zero_optimization": {"stage": stage},
    }
    args = TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=32,
        per_device_eval_batch_size=64,
        learning_rate=3e-3,
        num_train_epochs=1.0,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        deepspeed=config,
    )
    trainer = Trainer(
        model=tiny_classifier(),
        args=args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        compute_metrics=accuracy,
    )
    trainer.train()
    metrics = trainer.evaluate()
    engine = trainer.model_wrapped
    return {
        "world_size": args.world_size,
        "engine": type(engine).__name__,
        "stage": engine.zero_optimization_stage(),
        "train_batch_size": engine.train_batch_size(),
        "accuracy": metrics["eval_accuracy"],
    }


def test_the_trainer_runs_zero3_on_every_rank(tmp_path: Path) -> None:
    stage = 3
    results = notebook_launcher(
        _train, (str(tmp_path), stage), num_processes=2, cpu=True, timeout=300
    )
    for rank, result in enumerate(results):
        assert result["world_size"] == 2, (rank, result)
        assert result["engine"] == "DeepSpeedEngine" and result["stage"] == stage, result
        assert result["train_batch_size"] == 64, result  # 32 per rank x 2 ranks
    assert results[0]["accuracy"] == results[1]["accuracy"] > 0.3, results
