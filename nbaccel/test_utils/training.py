"""Tiny regression data and model for tests: ``y = a * x + b`` plus a little noise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from ..enums import DistributedType

__all__ = ["RegressionDataset", "RegressionModel", "mocked_dataloaders"]


class RegressionDataset(Dataset[dict[str, torch.Tensor]]):
    """``length`` samples ``{"x": x, "y": a * x + b + noise}``: x from a standard normal,
    the noise normal with standard deviation 0.1, both float32 scalars.

    Args:
        a: the slope.
        b: the intercept.
        length: the number of samples.
        seed: seed of the samples (None: different samples each time).
    """

    def __init__(self, a: float = 2, b: float = 3, length: int = 64, seed: int | None = None):
        generator = torch.Generator()
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(seed)
        self.length = length
        self.x = torch.randn(length, generator=generator)
        noise = torch.randn(length, generator=generator) * 0.1
        self.y = a * self.x + b + noise

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[index], "y": self.y[index]}


class RegressionModel(torch.nn.Module):
    """``a * x + b`` with ``a`` and ``b`` two scalar float parameters.

    Args:
        a: the initial slope.
        b: the initial intercept.
        double_output: accepted for compatibility; the model has one output.
    """

    def __init__(self, a: float = 0, b: float = 0, double_output: bool = False) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(float(a)))
        self.b = torch.nn.Parameter(torch.tensor(float(b)))
        self.first_batch = True

    def forward(self, x: torch.Tensor | None = None) -> torch.Tensor:
        if x is None:
            raise TypeError("RegressionModel needs the input: call model(x) with a tensor.")
        self.first_batch = False
        return x * self.a + self.b


def mocked_dataloaders(
    accelerator: Any, batch_size: int = 16, data_dir: str | Path = "tests/test_samples/MRPC"
) -> tuple[DataLoader[Any], DataLoader[Any]]:
    """Train and validation loaders over the MRPC sample files in ``data_dir``, tokenised
    with ``bert-base-cased`` (for example scripts run in tests without the full data set).

    Needs ``datasets`` and ``transformers`` (``pip install datasets transformers``) and the
    files ``train.csv`` and ``dev.csv`` in ``data_dir``. Train batches hold 2 samples and
    validation batches 1, whatever ``batch_size`` is, so that tests stay small.
    """
    try:
        # datasets and transformers are optional: only this helper needs them
        from datasets import load_dataset
        from transformers import AutoTokenizer
    except ImportError as error:
        raise ImportError(
            "mocked_dataloaders needs datasets and transformers: pip install datasets transformers"
        ) from error
    folder = Path(data_dir)
    files = {"train": str(folder / "train.csv"), "validation": str(folder / "dev.csv")}
    raw = load_dataset("csv", data_files=files)
    tokenizer = AutoTokenizer.from_pretrained("bert-base-cased")
    label_ids = {label: i for i, label in enumerate(raw["train"].unique("label"))}

    def tokenize(rows: dict[str, list[Any]]) -> Any:
        encoded = tokenizer(rows["sentence1"], rows["sentence2"], truncation=True)
        if "label" in rows:
            encoded["labels"] = [label_ids[label] for label in rows["label"]]
        return encoded

    columns = ["sentence1", "sentence2", "label"]
    tokenized = raw.map(tokenize, batched=True, remove_columns=columns)
    on_tpu = accelerator.distributed_type == DistributedType.XLA

    def collate(samples: list[Any]) -> Any:
        if on_tpu:  # fixed shapes: XLA compiles once
            return tokenizer.pad(samples, padding="max_length", max_length=128, return_tensors="pt")
        return tokenizer.pad(samples, padding="longest", return_tensors="pt")

    train = DataLoader(tokenized["train"], shuffle=True, collate_fn=collate, batch_size=2)
    validation = DataLoader(tokenized["validation"], collate_fn=collate, batch_size=1)
    return train, validation
