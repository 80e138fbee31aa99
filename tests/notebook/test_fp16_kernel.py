"""Hugging Face's notebook call ``notebook_launcher(train, ..., mixed_precision="fp16")`` in a
real Jupyter kernel on a machine without a GPU: the cell shows the fp16 warning once (not once
per rank), and the 2 ranks train in fp32 while reporting ``"fp16"``."""

from __future__ import annotations

import ast
from collections.abc import Iterator

import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from nbaccel.environment import cuda_device_count
from tests.support.kernel import Kernel, running_kernel

pytestmark = [
    pytest.mark.notebook,
    pytest.mark.skipif(cuda_device_count() > 0, reason="fp16 trains on this machine's GPUs"),
]

TRAIN = """
import torch
from torch import nn
from nbaccel import Accelerator, notebook_launcher

def train():
    accelerator = Accelerator()
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    with accelerator.autocast():
        out = model(torch.ones(2, 4))
    accelerator.backward(out.sum())
    optimizer.step()
    return accelerator.mixed_precision, str(out.dtype), accelerator.scaler is None
"""


@pytest.fixture(scope="module")
def kernel() -> Iterator[Kernel]:
    with running_kernel() as kernel:
        kernel.ok(TRAIN)
        yield kernel


def test_the_cell_shows_the_fp16_warning_once_and_the_ranks_train_in_fp32(
    kernel: Kernel,
) -> None:
    cell = kernel.ok(
        'print("RESULT", notebook_launcher(train, num_processes=2, mixed_precision="fp16"))',
        timeout=120,
    )
    shown = cell.stdout + cell.stderr
    assert shown.count("runs in full precision (fp32)") == 1, cell.describe()
    assert "mixed_precision='bf16'" in cell.stderr, cell.describe()
    found = [line for line in cell.lines() if line.startswith("RESULT ")]
    assert len(found) == 1, cell.describe()
    assert ast.literal_eval(found[0][len("RESULT ") :]) == [("fp16", "torch.float32", True)] * 2
