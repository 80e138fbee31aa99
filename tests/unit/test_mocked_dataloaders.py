"""nbaccel.test_utils.training.mocked_dataloaders_for_autoregressive_models: the batches of a
causal language model over MRPC-like sample files, computed here token by token, and the same
as Accelerate's helper gives for the same files and tokenizer.

The tokenizer is a real one built here from the files' words (the hub cannot be reached)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import torch

from nbaccel import Accelerator
from nbaccel.test_utils.training import mocked_dataloaders_for_autoregressive_models

datasets = pytest.importorskip("datasets", reason="the helper needs datasets: pip install datasets")
transformers = pytest.importorskip("transformers", reason="the helper needs transformers")
tokenizers = pytest.importorskip("tokenizers", reason="transformers' fast tokenizers")

EOS = "<|endoftext|>"
TRAIN = [
    "He said the pie business does n't fit .",
    "Magnarelli said Racicot hated the regime .",
    "The dollar was at 116.92 yen .",
    "Shares rose .",
    "The company said it expects earnings to fall in the quarter .",
]
DEV = ["He said the company fell .", "Shares said yen ."]


def write_samples(folder: Path) -> Path:
    """train.csv and dev.csv with MRPC's columns."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, sentences in (("train.csv", TRAIN), ("dev.csv", DEV)):
        with open(folder / name, "w", newline="", encoding="utf-8") as file:
            writer = csv.writer(file)
            writer.writerow(["label", "sentence1", "sentence2"])
            for i, sentence in enumerate(sentences):
                writer.writerow(["equivalent" if i % 2 else "not_equivalent", sentence, "x ."])
    return folder


def word_tokenizer() -> Any:
    """A word-level fast tokenizer over the samples' words; every text ends with EOS."""
    words = sorted({w for s in [*TRAIN, *DEV, "x ."] for w in s.split()})
    vocab = {"[UNK]": 0, EOS: 1, **{w: i + 2 for i, w in enumerate(words)}}
    model = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    model.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    model.post_processor = tokenizers.processors.TemplateProcessing(
        single=f"$A {EOS}", special_tokens=[(EOS, 1)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=model, unk_token="[UNK]", eos_token=EOS, model_max_length=64
    )


def expected_batch(sentences: list[str], multiple: int | None) -> dict[str, torch.Tensor]:
    """What a causal language model trains on, computed by hand: the tokens padded with EOS
    to the longest plus one (rounded up to ``multiple``); inputs drop the last position,
    labels the first, padding in labels is -100."""
    vocab = word_tokenizer().get_vocab()
    rows = [[vocab[w] for w in s.split()] + [vocab[EOS]] for s in sentences]
    width = max(len(r) for r in rows) + 1
    if multiple:
        width = -(-width // multiple) * multiple
    padded = torch.tensor([r + [vocab[EOS]] * (width - len(r)) for r in rows])
    labels = padded[:, 1:].clone()
    labels[labels == vocab[EOS]] = -100
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])[:, :-1]
    return {"input_ids": padded[:, :-1], "labels": labels, "attention_mask": mask}


def as_tensors(batch: Any) -> dict[str, torch.Tensor]:
    return {key: batch[key] for key in batch}


@pytest.mark.parametrize(("precision", "multiple"), [("no", None), ("bf16", 8)])
def test_batches_are_next_token_inputs_and_labels(
    tmp_path: Path, precision: str, multiple: int | None
) -> None:
    accelerator = Accelerator(cpu=True, mixed_precision=precision)
    train, validation = mocked_dataloaders_for_autoregressive_models(
        accelerator, data_dir=write_samples(tmp_path), tokenizer=word_tokenizer()
    )
    assert (train.batch_size, validation.batch_size) == (2, 1)
    got = [as_tensors(b) for b in train]
    wanted = [expected_batch(TRAIN[i : i + 2], multiple) for i in range(0, len(TRAIN), 2)]
    assert len(got) == len(wanted) == 3
    for batch, expected in zip(got, wanted, strict=True):
        assert sorted(batch) == sorted(expected)
        for key in expected:
            assert torch.equal(batch[key], expected[key]), key
    for batch, sentence in zip(validation, DEV, strict=True):
        assert torch.equal(batch["labels"], expected_batch([sentence], multiple)["labels"])
    # padding is EOS, so the sentence's own final EOS is -100 in its labels too (as in
    # Accelerate): the longest sentence's labels end with it and one position of padding
    assert got[2]["labels"][0, -2:].tolist() == [-100, -100]
    if multiple is None:  # no rounding up: exactly those two
        assert (got[2]["labels"][0] == -100).sum() == 2


def test_the_same_batches_as_accelerates_helper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Accelerate's reads tests/test_samples/MRPC and loads its tokenizer by name: run it
    where those files are, with the name answered by the same tokenizer."""
    from accelerate.test_utils import training as accelerate_training

    write_samples(tmp_path / "tests" / "test_samples" / "MRPC")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        transformers.AutoTokenizer, "from_pretrained", lambda *args, **kwargs: word_tokenizer()
    )
    accelerator = Accelerator(cpu=True)
    theirs = accelerate_training.mocked_dataloaders_for_autoregressive_models(accelerator)
    ours = mocked_dataloaders_for_autoregressive_models(accelerator)  # the same defaults
    for mine, reference in zip(ours, theirs, strict=True):
        got, expected = [as_tensors(b) for b in mine], [as_tensors(b) for b in reference]
        assert len(got) == len(expected) > 0
        for batch, other in zip(got, expected, strict=True):
            assert sorted(batch) == sorted(other)
            assert all(torch.equal(batch[k], other[k]) for k in batch)


def test_without_the_files_the_error_names_them(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"train\.csv"):
        mocked_dataloaders_for_autoregressive_models(
            Accelerator(cpu=True), data_dir=tmp_path, tokenizer=word_tokenizer()
        )
