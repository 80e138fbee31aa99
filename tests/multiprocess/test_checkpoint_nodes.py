"""save_state with ``save_on_each_node`` on two machines that share no file system: two node
groups of 2 processes each over loopback, every node saving into its own directory."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import pythonpath

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]

NODE_SCRIPT = """
import json, sys

from nbaccel import notebook_launcher
from tests.support import checkpoints

node, port, root = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
results = notebook_launcher(
    checkpoints.save_per_node,
    (f"{root}/node{node}",),  # each machine's own disk
    num_processes=2,
    num_nodes=2,
    node_rank=node,
    master_addr="127.0.0.1",
    use_port=port,
    rendezvous_timeout=60,
    start_method="fork",
)
print("RESULT " + json.dumps(results), flush=True)
"""

SHARED = [
    "checkpoint.json",
    "custom_checkpoint_0.pkl",
    "dl_state_dict.bin",
    "model.safetensors",
    "optimizer.safetensors",
    "scheduler.bin",
]


def _run_two_nodes(
    tmp_path: Path, port: int, environ: dict[str, str]
) -> list[list[dict[str, Any]]]:
    script = tmp_path / "node.py"
    script.write_text(NODE_SCRIPT)
    root = tmp_path / "disks"
    nodes = [
        subprocess.Popen(
            [sys.executable, str(script), str(node), str(port), str(root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
            cwd=tmp_path,
        )
        for node in (0, 1)
    ]
    results = []
    try:
        for node in nodes:
            out, err = node.communicate(timeout=90)
            assert node.returncode == 0, f"node failed:\n{out}\n{err[-3000:]}"
            (line,) = [x for x in out.splitlines() if x.startswith("RESULT ")]
            results.append(json.loads(line[len("RESULT ") :]))
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.wait()
    return results


def test_save_on_each_node_writes_a_complete_checkpoint_on_every_machine(
    tmp_path: Path,
    free_port: Callable[[], int],
    subprocess_environ: Callable[..., dict[str, str]],
) -> None:
    """Promise: with ``save_on_each_node=True`` each machine's first process writes the shared
    files into that machine's directory and every process its own random states there, so
    each machine holds a complete checkpoint (its manifest listing exactly its files) that
    loads on it: weights, optimizer, scheduler, registered object and random states come
    back. Without it only the global main process's machine gets the shared files; the
    others keep the data loader positions and their own random states."""
    # the checkout (tests.support, and nbaccel without an install too) on the nodes' path
    results = _run_two_nodes(tmp_path, free_port(), subprocess_environ(PYTHONPATH=pythonpath()))
    for node, node_results in enumerate(results):
        assert [r["rank"] for r in node_results] == [2 * node, 2 * node + 1]
        assert [r["local_rank"] for r in node_results] == [0, 1]
        assert all(r["failed"] == [] for r in node_results), node_results
    disks = tmp_path / "disks"
    for node in (0, 1):
        each = disks / f"node{node}" / "each"
        ranks = [f"random_states_{r}.pkl" for r in (2 * node, 2 * node + 1)]
        assert sorted(p.name for p in each.iterdir()) == sorted(SHARED + ranks)
        manifest = json.loads((each / "checkpoint.json").read_text())
        assert manifest["num_processes"] == 4
        assert sorted(manifest["files"]) == sorted(n for n in SHARED + ranks if n != SHARED[0])
    node0, node1 = disks / "node0", disks / "node1"
    assert (node0 / "each" / "model.safetensors").read_bytes() == (
        node1 / "each" / "model.safetensors"
    ).read_bytes()  # the same weights, written once on each machine

    # without save_on_each_node: the shared files only on the global main process's machine;
    # the other machine keeps, as with Accelerate, its random states and the data loader
    # positions in its own directory (and the same positions as the main machine's)
    main_only = node0 / "main_only"
    assert sorted(p.name for p in main_only.iterdir()) == sorted(
        [*SHARED, "random_states_0.pkl", "random_states_1.pkl"]
    )
    assert sorted(p.name for p in node0.iterdir()) == ["each", "main_only"]
    assert sorted(p.name for p in (node1 / "main_only").iterdir()) == [
        "dl_state_dict.bin",
        "random_states_2.pkl",
        "random_states_3.pkl",
    ]
    assert (node1 / "main_only" / "dl_state_dict.bin").read_bytes() == (
        main_only / "dl_state_dict.bin"
    ).read_bytes()
    # and no staging directory is left behind on the other machine's disk
    assert sorted(p.name for p in node1.iterdir()) == ["each", "main_only"], list(node1.iterdir())
