"""Checkpoints when each machine has its own disk (a directory per namespace)."""

from __future__ import annotations

import json
import shutil

import pytest
from bed import Bed, Machine, run_both

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(300)]

SHARED = [
    "checkpoint.json",
    "custom_checkpoint_0.pkl",
    "dl_state_dict.bin",
    "model.safetensors",
    "optimizer.safetensors",
    "scheduler.bin",
]

LAUNCH = """
import node_functions
from tests.support import checkpoints
results = notebook_launcher(
    {function}, ({disk!r},), num_processes=2, num_nodes=2, node_rank={node},
    master_addr='192.0.2.1', use_port={port}, rendezvous_timeout=60, node_timeout=30,
)
print("RESULT " + json.dumps(results))
"""


def _launch(bed: Bed, machines: list[Machine], function: str, port: int) -> list[list]:
    cells = [
        LAUNCH.format(function=function, disk=str(bed.disks[n]), node=n, port=port) for n in (0, 1)
    ]
    out = []
    for answer in run_both(machines, cells, timeout=180):
        assert answer["error"] is None, answer
        (line,) = [x for x in answer["stdout"].splitlines() if x.startswith("RESULT ")]
        out.append(json.loads(line[len("RESULT ") :]))
    return out


def test_save_and_load_state_on_separate_disks(bed: Bed, machines: list[Machine]) -> None:
    """Promise: with save_on_each_node each machine writes a complete checkpoint to its own
    disk and both load it back exactly (weights, optimizer, scheduler, progress, random
    states); without it only machine 0's disk gets the shared files."""
    results = _launch(bed, machines, "checkpoints.save_per_node", 29530)
    for node, node_results in enumerate(results):
        assert [r["rank"] for r in node_results] == [2 * node, 2 * node + 1]
        assert all(r["failed"] == [] for r in node_results), node_results  # exact resume
    for node, disk in enumerate(bed.disks):
        ranks = [f"random_states_{r}.pkl" for r in (2 * node, 2 * node + 1)]
        assert sorted(p.name for p in (disk / "each").iterdir()) == sorted(SHARED + ranks)
    assert (bed.disks[0] / "each" / "model.safetensors").read_bytes() == (
        bed.disks[1] / "each" / "model.safetensors"
    ).read_bytes()
    main_only = bed.disks[0] / "main_only"
    assert sorted(p.name for p in main_only.iterdir()) == sorted(
        [*SHARED, "random_states_0.pkl", "random_states_1.pkl"]
    )
    # like Accelerate: machine 1 keeps its ranks' random states (and the loader positions),
    # never the weights
    theirs = {p.name for p in (bed.disks[1] / "main_only").iterdir()}
    assert {"random_states_2.pkl", "random_states_3.pkl"} <= theirs
    assert "model.safetensors" not in theirs


MERGE = """
from nbaccel.utils import merge_fsdp_weights
merge_fsdp_weights({source!r}, {target!r})
"""


def test_merge_fsdp_weights_with_shards_on_both_machines(bed: Bed, machines: list[Machine]) -> None:
    """Promise: merging on machine 0 a sharded checkpoint whose shards are on both machines'
    disks fails with an error naming the missing shards and how to gather them; once they
    are copied over, the merge gives the trained model's full weights."""
    _launch(bed, machines, "node_functions.save_sharded", 29531)
    source = bed.disks[0] / "sharded" / "pytorch_model_fsdp_0"
    elsewhere = bed.disks[1] / "sharded" / "pytorch_model_fsdp_0"
    assert sorted(p.name for p in elsewhere.glob("*.distcp")) == ["__2_0.distcp", "__3_0.distcp"]
    target = bed.disks[0] / "merged"
    answer = machines[0].run(MERGE.format(source=str(source), target=str(target)))
    error = answer["error"]
    assert error is not None and error["ename"] == "FileNotFoundError", answer
    assert "__2_0.distcp" in error["evalue"] and "__3_0.distcp" in error["evalue"]
    assert "copy" in error["evalue"].lower() and "every machine" in error["evalue"]
    assert not target.exists()
    for shard in elsewhere.glob("*.distcp"):  # what the error says to do (rsync / scp)
        shutil.copy(shard, source / shard.name)
    answer = machines[0].run(
        MERGE.format(source=str(source), target=str(target))
        + "import torch\nfrom safetensors.torch import load_file\n"
        f"merged = load_file({str(target / 'model.safetensors')!r})\n"
        f"expected = torch.load({str(bed.disks[0] / 'expected0.pt')!r})\n"
        "assert merged.keys() == expected.keys(), (merged.keys(), expected.keys())\n"
        "assert all(torch.equal(merged[k], expected[k]) for k in merged)\n"
        "print('MERGED', len(merged))\n"
    )
    assert answer["error"] is None and "MERGED" in answer["stdout"], answer
