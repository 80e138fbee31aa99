"""The Accelerator on 2 and 3 real gloo ranks: one launch per world size, one test per check,
and N processes x batch b trained to the same weights as 1 process x batch N*b."""

from __future__ import annotations

from typing import Any

import accelerator_checks as checks
import pytest
import torch
from torch import nn

from nbaccel import notebook_launcher
from nbaccel.testing import reset_state

pytestmark = pytest.mark.multiprocess

# Checks that show a known nbaccel bug: they must keep failing until it is fixed.
KNOWN_BUGS: dict[str, str] = {}
CHECK_NAMES = [
    pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[name]))
    if name in KNOWN_BUGS
    else name
    for name in (function.__name__ for function in checks.CHECKS)
]


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"{n}ranks")
def per_rank(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    """Every rank's results from one launch of ``request.param`` ranks."""
    results = notebook_launcher(
        checks.run_all_checks, num_processes=request.param, start_method="fork", timeout=180
    )
    assert len(results) == request.param
    return results


@pytest.mark.parametrize("name", CHECK_NAMES)
def test_check(per_rank: list[dict[str, Any]], name: str) -> None:
    outcomes = [result["checks"].get(name, "did not run") for result in per_rank]
    failures = [
        f"{name} failed on rank {rank}/{len(per_rank)}:\n{outcome}"
        for rank, outcome in enumerate(outcomes)
        if outcome != "ok"
    ]
    assert not failures, "\n\n".join(failures)


# --- parity ------------------------------------------------------------------------------------


def plain_torch_training(batches: list[list[int]], accumulation: int) -> dict[str, torch.Tensor]:
    """An independent oracle: plain PyTorch over the given batches, in order, per epoch."""
    _, x, y = checks.parity_dataset().tensors
    model = checks.parity_model()
    optimizer = checks.parity_optimizer(model)
    per_epoch = len(batches) // checks.PARITY_EPOCHS
    for i, index in enumerate(batches):
        position = i % per_epoch
        loss = nn.functional.mse_loss(model(x[index]), y[index]) / accumulation
        loss.backward()
        if (position + 1) % accumulation == 0 or position == per_epoch - 1:
            optimizer.step()
            optimizer.zero_grad()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same_weights(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, atol=1e-5, rtol=1e-4, msg=name)


def largest_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.parametrize("case", list(checks.PARITY_CASES))
def test_n_processes_train_like_one_process_with_the_global_batch(
    per_rank: list[dict[str, Any]], case: str
) -> None:
    world = len(per_rank)
    accumulation, _ = checks.PARITY_CASES[case]
    runs = [result["parity"][case] for result in per_rank]
    errors = [run["error"] for run in runs if "error" in run]
    assert not errors, "\n\n".join(errors)
    assert all(run["num_processes"] == world for run in runs)

    # the reference: one process of this pytest process, the whole global batch at once
    reset_state()
    reference = checks.train_for_parity(case, checks.PER_RANK_BATCH * world)
    reset_state()
    assert reference["num_processes"] == 1

    # every rank saw different data, together exactly the reference's global batches
    for step, global_batch in enumerate(reference["seen"]):
        shares = [run["seen"][step] for run in runs]
        together = [index for share in shares for index in share]
        assert all(len(s) == checks.PER_RANK_BATCH for s in shares)
        assert sorted(together) == sorted(global_batch), (step, shares)
        assert len(set(together)) == checks.PER_RANK_BATCH * world

    for run in runs:
        assert_same_weights(run["weights"], reference["weights"])

    # the reference is right: plain PyTorch over the same global batches agrees with it
    oracle = plain_torch_training(reference["seen"], accumulation)
    assert_same_weights(reference["weights"], oracle)
    # and the comparison can fail: rank 0 training on its own share alone ends elsewhere
    alone = plain_torch_training(runs[0]["seen"], accumulation)
    assert largest_difference(alone, reference["weights"]) > 1e-3
    # the weights moved far from their initial values
    untouched = checks.parity_model().state_dict()
    assert largest_difference(untouched, reference["weights"]) > 1e-2
