"""LocalSGD on 2 real gloo ranks that see different data: no gradient sync inside the block,
parameters that differ between averagings, equal right after each one, and equal to the mean
of the ranks' parameters, computed here; the whole run matches plain PyTorch doing the same."""

from __future__ import annotations

from typing import Any

import local_sgd_checks as checks
import pytest
import torch
from torch import nn

from nbaccel import notebook_launcher

pytestmark = pytest.mark.multiprocess

WORLD = 2


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    results = notebook_launcher(checks.run, num_processes=WORLD, start_method="fork", timeout=180)
    assert [r["rank"] for r in results] == list(range(WORLD))
    assert all(r["distributed_type"] == "MULTI_CPU" for r in results)
    return results


def equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def mean(per_rank: list[list[torch.Tensor]]) -> list[torch.Tensor]:
    """The element-wise mean of every rank's parameters, written out."""
    return [sum(tensors) / len(tensors) for tensors in zip(*per_rank, strict=True)]


def assert_close(got: list[torch.Tensor], expected: list[torch.Tensor]) -> None:
    for x, y in zip(got, expected, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-6, atol=1e-7)


def test_gradients_do_not_synchronise_inside_the_block(ranks: list[dict[str, Any]]) -> None:
    runs = [r["on"] for r in ranks]
    assert all(run["enabled"] is True for run in runs)
    for step in range(checks.STEPS):
        assert not equal(runs[0]["grads"][step], runs[1]["grads"][step]), step


def test_parameters_are_averaged_every_local_sgd_steps(ranks: list[dict[str, Any]]) -> None:
    runs = [r["on"] for r in ranks]
    averaged = 0
    for step in range(checks.STEPS):
        local = [run["local"][step] for run in runs]
        after = [run["after"][step] for run in runs]
        assert not equal(local[0], local[1]), f"step {step}: the ranks trained on other data"
        if (step + 1) % checks.LOCAL_SGD_STEPS == 0:
            averaged += 1
            assert equal(after[0], after[1]), f"step {step}: equal right after averaging"
            assert_close(after[0], mean(local))
        else:
            assert all(equal(a, b) for a, b in zip(after, local, strict=True)), step
            assert not equal(after[0], after[1]), f"step {step}: apart between averagings"
    assert averaged == checks.STEPS // checks.LOCAL_SGD_STEPS == 2
    assert all(run["num_steps"] == checks.STEPS for run in runs)


def test_leaving_the_block_averages_once_more(ranks: list[dict[str, Any]]) -> None:
    runs = [r["on"] for r in ranks]
    last = [run["after"][-1] for run in runs]
    assert not equal(last[0], last[1])  # the 7th step was not an averaging one
    assert equal(runs[0]["final"], runs[1]["final"])
    assert_close(runs[0]["final"], mean(last))


def average(models: list[nn.Module]) -> None:
    """Replace each parameter of every model by its mean over the models."""
    with torch.no_grad():
        for parameters in zip(*(m.parameters() for m in models), strict=True):
            value = sum(p.detach().clone() for p in parameters) / len(parameters)
            for p in parameters:
                p.copy_(value)


def test_the_run_is_plain_pytorch_local_sgd(ranks: list[dict[str, Any]]) -> None:
    """Independent oracle: one model per rank in this process, SGD on that rank's batches,
    parameters replaced by their mean every LOCAL_SGD_STEPS steps and at the end."""
    models = [checks.initial_model() for _ in range(WORLD)]
    optimizers = [torch.optim.SGD(m.parameters(), lr=checks.LR) for m in models]
    for step in range(checks.STEPS):
        for rank, (model, optimizer) in enumerate(zip(models, optimizers, strict=True)):
            checks.loss_of(model, rank, step).backward()
            optimizer.step()
            optimizer.zero_grad()
        if (step + 1) % checks.LOCAL_SGD_STEPS == 0 or step == checks.STEPS - 1:
            average(models)
    expected = [p.detach() for p in models[0].parameters()]
    for run in (r["on"] for r in ranks):
        for got, want in zip(run["final"], expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    untouched = [p.detach() for p in checks.initial_model().parameters()]
    assert not equal(expected, untouched)


def test_disabled_it_leaves_ddp_synchronising_every_step(ranks: list[dict[str, Any]]) -> None:
    runs = [r["off"] for r in ranks]
    assert all(run["enabled"] is False and run["num_steps"] == checks.STEPS for run in runs)
    for step in range(checks.STEPS):
        assert_close(runs[0]["grads"][step], runs[1]["grads"][step])
        assert equal(runs[0]["after"][step], runs[1]["after"][step]), step
