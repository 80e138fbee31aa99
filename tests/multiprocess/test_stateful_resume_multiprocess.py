"""use_stateful_dataloader=True on 2 real gloo ranks: a run stopped mid-epoch right after
save_state and resumed by load_state in a fresh launch trains on exactly the batches it had
not seen, batch for batch as an uninterrupted run, and ends with its weights, bit for bit."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import stateful_checks
import torch

from nbaccel import notebook_launcher

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.skipif(
        importlib.util.find_spec("torchdata") is None,
        reason="needs torchdata (pip install torchdata)",
    ),
]


@pytest.mark.parametrize("num_workers", [0, 2], ids=lambda n: f"{n}workers")
@pytest.mark.parametrize("dispatch", [False, True], ids=["shard", "dispatch_batches"])
def test_a_resumed_launch_trains_on_exactly_the_batches_it_had_not_seen(
    tmp_path: Path, num_workers: int, dispatch: bool
) -> None:
    directory = str(tmp_path / "ckpt")

    def launch(mode: str) -> list[dict]:
        args = (mode, directory, num_workers, dispatch)
        return notebook_launcher(stateful_checks.run, args, num_processes=2, timeout=180)

    full, first, resumed = launch("full"), launch("first"), launch("resume")
    for rank in range(2):
        assert len(first[rank]["seen"]) == 6 * 1 + stateful_checks.STOP[1]  # 6 batches an epoch
        assert first[rank]["seen"] + resumed[rank]["seen"] == full[rank]["seen"], rank
        for key, value in full[rank]["weights"].items():
            assert torch.equal(value, resumed[rank]["weights"][key]), (rank, key)
    flat = [i for rank in range(2) for batch in full[rank]["seen"][6:12] for i in batch]
    assert sorted(set(flat)) == list(range(stateful_checks.SAMPLES))  # epoch 1, all of it
    saved = torch.load(Path(directory, "dl_state_dict.bin"), weights_only=True)
    assert (saved["epoch"], saved["_iterator_finished"]) == (1, False)
    assert ("_snapshot" if num_workers else "_num_yielded") in saved  # torchdata's own format
    if dispatch:  # process 0 reads the data and shares its position: one state on every rank
        assert first[0]["state"] == first[1]["state"]
