"""Tiny regression data and model for tests: ``y = a * x + b`` plus a little noise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from ..enums import DistributedType

__all__ = [
    "RegressionDataset",
    "RegressionModel",
    "mocked_dataloaders",
    "mocked_dataloaders_for_autoregressive_models",
]


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


def _hugging_face_suite(helper: str) -> tuple[Any, Any]:
    """``datasets.load_dataset`` and ``transformers.AutoTokenizer``, or an error saying how to
    install them."""
    try:
        # datasets and transformers are optional: only the mocked loaders need them
        from datasets import load_dataset
        from transformers import AutoTokenizer
    except ImportError as error:
        raise ImportError(
            f"{helper} needs datasets and transformers: pip install datasets transformers"
        ) from error
    return load_dataset, AutoTokenizer


def _mrpc_files(data_dir: str | Path) -> dict[str, str]:
    folder = Path(data_dir)
    return {"train": str(folder / "train.csv"), "validation": str(folder / "dev.csv")}


def mocked_dataloaders(
    accelerator: Any, batch_size: int = 16, data_dir: str | Path = "tests/test_samples/MRPC"
) -> tuple[DataLoader[Any], DataLoader[Any]]:
    """Train and validation loaders over the MRPC sample files in ``data_dir``, tokenised
    with ``bert-base-cased`` (for example scripts run in tests without the full data set).

    Needs ``datasets`` and ``transformers`` (``pip install datasets transformers``) and the
    files ``train.csv`` and ``dev.csv`` in ``data_dir``. Train batches hold 2 samples and
    validation batches 1, whatever ``batch_size`` is, so that tests stay small.
    """
    load_dataset, auto_tokenizer = _hugging_face_suite("mocked_dataloaders")
    raw = load_dataset("csv", data_files=_mrpc_files(data_dir))
    tokenizer = auto_tokenizer.from_pretrained("bert-base-cased")
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


def mocked_dataloaders_for_autoregressive_models(
    accelerator: Any,
    batch_size: int = 16,
    data_dir: str | Path = "tests/test_samples/MRPC",
    tokenizer: Any = "HuggingFaceTB/SmolLM-360M",
) -> tuple[DataLoader[Any], DataLoader[Any]]:
    """Train and validation loaders for a causal language model over the first sentences of
    the MRPC sample files in ``data_dir`` (for example scripts that train one, in tests).

    Each batch holds ``input_ids`` and ``labels``, the same tokens one position ahead, with
    padding (the end-of-sequence token) as -100 in ``labels``. Sequences are padded to the
    longest of the batch (128 on TPU), to a multiple of 8 under mixed precision (16 under
    fp8). Train batches hold 2 samples and validation batches 1, whatever ``batch_size`` is;
    neither is shuffled. The main process tokenises first.

    Needs ``datasets`` and ``transformers`` (``pip install datasets transformers``) and the
    files ``train.csv`` and ``dev.csv`` in ``data_dir``.

    Args:
        accelerator: the ``Accelerator`` (its ``distributed_type`` and ``mixed_precision``
            shape the padding).
        batch_size: accepted for compatibility; see above.
        data_dir: the folder of the sample files.
        tokenizer: a tokenizer, or the name ``AutoTokenizer.from_pretrained`` loads; its
            padding token is set to its end-of-sequence token.
    """
    load_dataset, auto_tokenizer = _hugging_face_suite(
        "mocked_dataloaders_for_autoregressive_models"
    )
    if isinstance(tokenizer, (str, Path)):
        tokenizer = auto_tokenizer.from_pretrained(str(tokenizer))
    tokenizer.pad_token = tokenizer.eos_token
    raw = load_dataset("csv", data_files=_mrpc_files(data_dir))

    def tokenize(rows: dict[str, list[Any]]) -> Any:
        return tokenizer(rows["sentence1"], truncation=True, return_attention_mask=False)

    with accelerator.main_process_first():
        tokenized = raw.map(
            tokenize, batched=True, remove_columns=["sentence1", "sentence2", "label"]
        )
    on_tpu = accelerator.distributed_type == DistributedType.XLA
    precision = str(accelerator.mixed_precision)
    multiple = 16 if precision == "fp8" else 8 if precision != "no" else None

    def collate(samples: list[Any]) -> Any:
        longest = 128 if on_tpu else max(len(sample["input_ids"]) for sample in samples)
        batch = tokenizer.pad(
            samples,
            padding="max_length",
            max_length=longest + 1,  # one more: inputs and labels each lose one end
            pad_to_multiple_of=multiple,
            return_tensors="pt",
        )
        ids = batch["input_ids"]
        batch["labels"] = torch.where(ids[:, 1:] == tokenizer.pad_token_id, -100, ids[:, 1:])
        batch["input_ids"] = ids[:, :-1]
        if "attention_mask" in batch:
            batch["attention_mask"] = batch["attention_mask"][:, :-1]
        return batch

    train = DataLoader(tokenized["train"], shuffle=False, collate_fn=collate, batch_size=2)
    validation = DataLoader(tokenized["validation"], collate_fn=collate, batch_size=1)
    return train, validation
