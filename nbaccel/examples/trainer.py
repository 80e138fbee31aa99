"""A Transformers ``Trainer`` example: a tiny classifier built from its config, on the digits.

Nothing is downloaded: the model is a ``PreTrainedModel`` (an MLP over the 64 pixels of
scikit-learn's 8x8 digits) made from its ``PretrainedConfig`` with random weights. Used by
``notebooks/08_transformers_trainer.ipynb`` and the notebook tests.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .quickstart import import_extra, load_digits_tensors

__all__ = ["DigitImages", "accuracy", "digit_images", "tiny_classifier", "train_with_trainer"]

_MISSING_TRANSFORMERS = (
    "This example trains with Hugging Face Transformers, which is not installed. Install it "
    'with: pip install "nbaccel[examples]" (or pip install transformers).'
)


def _transformers() -> Any:
    # transformers is optional (the trainer extra)
    return import_extra("transformers", _MISSING_TRANSFORMERS)


class DigitImages(torch.utils.data.Dataset):
    """Digits as the Trainer takes them: ``{"pixels": 64 values in [0, 1], "labels": digit}``."""

    def __init__(self, pixels: torch.Tensor, labels: torch.Tensor) -> None:
        self.pixels, self.labels = pixels, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"pixels": self.pixels[index], "labels": self.labels[index]}


def digit_images() -> tuple[DigitImages, DigitImages]:
    """The train and evaluation splits of the quickstart (the same on every rank)."""
    x_train, y_train, x_test, y_test = load_digits_tensors()
    return DigitImages(x_train, y_train), DigitImages(x_test, y_test)


def tiny_classifier(hidden: int = 128, seed: int = 0) -> Any:
    """A Transformers model built from its config (random weights, nothing downloaded)."""
    transformers = _transformers()
    torch.manual_seed(seed)
    return _model_class(transformers)(_config_class(transformers)(hidden=hidden))


def _config_class(transformers: Any) -> type:
    class DigitsConfig(transformers.PretrainedConfig):
        """Settings of :func:`tiny_classifier`: the width of its hidden layer."""

        model_type = "nbaccel-digits"

        def __init__(self, hidden: int = 128, **kwargs: Any) -> None:
            kwargs.setdefault("num_labels", 10)
            super().__init__(**kwargs)
            self.hidden = hidden

    return DigitsConfig


def _model_class(transformers: Any) -> type:

    class DigitsClassifier(transformers.PreTrainedModel):
        """An MLP over the 64 pixels, as a ``PreTrainedModel`` the Trainer trains."""

        config_class = _config_class(transformers)

        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self.net = nn.Sequential(
                nn.Linear(64, config.hidden), nn.ReLU(), nn.Linear(config.hidden, 10)
            )

        def forward(self, pixels: torch.Tensor, labels: torch.Tensor | None = None) -> Any:
            logits = self.net(pixels)
            loss = None if labels is None else nn.functional.cross_entropy(logits, labels)
            return transformers.modeling_outputs.SequenceClassifierOutput(loss=loss, logits=logits)

    return DigitsClassifier


def accuracy(prediction: Any) -> dict[str, float]:
    """``compute_metrics`` for the Trainer: the share of correct digits."""
    logits, labels = prediction.predictions, prediction.label_ids
    return {"accuracy": float((logits.argmax(-1) == labels).mean())}


def train_with_trainer(output_dir: str, epochs: float = 2.0, **arguments: Any) -> dict[str, Any]:
    """Fine-tune :func:`tiny_bert` with a ``Trainer`` (launch it with ``notebook_launcher``).

    ``arguments`` go to ``TrainingArguments`` (for instance ``fsdp="full_shard"``). Returns the
    rank, the world size the Trainer saw, how it wrapped the model, and the evaluation metrics.
    """
    # transformers is optional (the trainer extra)
    from transformers import Trainer, TrainingArguments

    train_set, eval_set = digit_images()
    options: dict[str, Any] = {
        "per_device_train_batch_size": 32,
        "per_device_eval_batch_size": 64,
        "learning_rate": 3e-3,
        "num_train_epochs": epochs,
        "eval_strategy": "epoch",
        "logging_steps": 5,
        "save_strategy": "no",
        "report_to": [],
        "use_cpu": True,
        "seed": 0,
        "ddp_find_unused_parameters": False,
    }
    options.update(arguments)
    args = TrainingArguments(output_dir=output_dir, **options)
    trainer = Trainer(
        model=tiny_classifier(),
        args=args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        compute_metrics=accuracy,
    )
    trainer.train()
    metrics = trainer.evaluate()
    return {
        "rank": args.process_index,
        "world_size": args.world_size,
        "wrapped_as": type(trainer.model_wrapped).__name__,
        "eval_accuracy": metrics["eval_accuracy"],
        "eval_loss": metrics["eval_loss"],
    }
