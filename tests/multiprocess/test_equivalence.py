"""N ranks with batch b end with the same weights as one process with batch N*b.

The training function uses the Accelerator with a shuffling data loader, so this also checks
that the shuffle is the same permutation and that each global batch is split between ranks.
"""

from __future__ import annotations

import pytest
import torch

from nbaccel import notebook_launcher
from nbaccel.testing.training import train_classifier

pytestmark = pytest.mark.multiprocess


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_through_the_launcher_matches_one_process(world: int) -> None:
    single = notebook_launcher(train_classifier, (2, 48, 0.05), num_processes=1)[0]
    ranks = notebook_launcher(train_classifier, (2, 48 // world, 0.05), num_processes=world)
    assert [r["rank"] for r in ranks] == list(range(world))
    assert all(r["steps"] == single["steps"] for r in ranks)
    for result in ranks:
        for name, expected in single["state_dict"].items():
            torch.testing.assert_close(result["state_dict"][name], expected, atol=1e-5, rtol=1e-4)
    # the weights moved: the comparison is not between two untouched initialisations
    untouched = train_classifier.__globals__["make_model"]()
    moved = [
        (single["state_dict"][k] - v).abs().max().item() for k, v in untouched.state_dict().items()
    ]
    assert max(moved) > 1e-2
    assert single["accuracy"] >= 0.8 and ranks[0]["accuracy"] == pytest.approx(single["accuracy"])
    # gather_for_metrics returned every test sample exactly once (512 is not a multiple of 48)
    assert single["evaluated"] == 512 and all(r["evaluated"] == 512 for r in ranks)
