"""`nbaccel launch` across the two machines, with flags and with the FSDP guide's config file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from bed import ADDRESSES, REPO, SECOND, Bed

from tests.support.paths import pythonpath

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(300)]

SCRIPT = """
import torch
import torch.distributed as dist
from nbaccel import Accelerator

accelerator = Accelerator()
value = torch.tensor([float(accelerator.process_index)])
dist.all_reduce(value)
print(f"RANK {accelerator.process_index} WORLD {accelerator.num_processes} SUM {value.item()} "
      f"TYPE {accelerator.distributed_type}", flush=True)
"""
GUIDE = REPO / "tests" / "fixtures" / "fsdp_guide_config.yaml"


HOLD = """
import sys, time
from pathlib import Path
import torch
import torch.distributed as dist
from nbaccel import Accelerator

accelerator = Accelerator()
dist.all_reduce(torch.ones(1))
flags = Path(sys.argv[1])
(flags / f"holding{accelerator.process_index}").touch()
deadline = time.monotonic() + 60
while not (flags / "release").exists() and time.monotonic() < deadline:
    time.sleep(0.1)
accelerator.wait_for_everyone()
print(f"RANK {accelerator.process_index} RELEASED", flush=True)
"""


def _start(bed: Bed, commands: list[list[str]], cwd: Path) -> list[subprocess.Popen[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NBACCEL_", "GLOO_"))}
    env["PYTHONPATH"] = pythonpath(environ=env)
    return [
        subprocess.Popen(
            ["ip", "netns", "exec", bed.ns[n], sys.executable, "-m", "nbaccel", *commands[n]],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=cwd,
        )
        for n in (0, 1)
    ]


def _on_both(bed: Bed, commands: list[list[str]], cwd: Path) -> list[str]:
    return _finish(_start(bed, commands, cwd))


def _finish(processes: list[subprocess.Popen[str]]) -> list[str]:
    outputs = []
    try:
        for process in processes:
            out, _ = process.communicate(timeout=200)
            assert process.returncode == 0, out[-4000:]
            outputs.append(out)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return outputs


def _ranks(out: str) -> list[tuple[int, int, float]]:
    found = re.findall(r"RANK (\d+) WORLD (\d+) SUM ([\d.]+)", out)
    return sorted((int(r), int(w), float(s)) for r, w, s in found)


def test_nbaccel_launch_across_two_machines(bed: Bed, tmp_path: Path) -> None:
    """Promise: machine 0 runs `nbaccel launch --num_machines 2 --machine_rank 0
    --main_process_ip 192.0.2.1`, machine 1 the Transformers FSDP guide's config file with
    num_machines, machine_rank and main_process_ip (a host name) set; neither names a port, so
    both use 29500, and the script's four ranks make one world across the link."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    flags = ["--num_machines", "2", "--num_processes", "2", "--cpu", "--machine_rank", "0"]
    config = yaml.safe_load(GUIDE.read_text())
    config.update(
        num_machines=2,
        num_processes=4,  # over all machines, as in Accelerate's file
        machine_rank=1,
        main_process_ip="main-machine",
        use_cpu=True,
        mixed_precision="no",
    )
    path = tmp_path / "machine1.yaml"
    path.write_text(yaml.safe_dump(config))
    commands = [
        ["launch", *flags, "--main_process_ip", "192.0.2.1", str(script)],
        ["launch", "--config_file", str(path), str(script)],
    ]
    outputs = _on_both(bed, commands, tmp_path)
    for node, out in enumerate(outputs):
        assert _ranks(out) == [(2 * node, 4, 6.0), (2 * node + 1, 4, 6.0)], out[-3000:]
        assert "2 process(es) x 2 machine(s)" in out, out[-3000:]
    assert "FSDP" in outputs[1].splitlines()[0] or "FSDP" in outputs[1], outputs[1][-3000:]


@pytest.mark.parametrize("backend", ["static", "c10d"])
def test_nbaccel_launch_listens_on_the_address_that_reaches_the_master(
    backend: str, bed: Bed, tmp_path: Path
) -> None:
    """Promise: `nbaccel launch` across two machines listens only on the address that routes
    to the main machine (its store, the c10d stores, gloo): never on every interface, never on
    the second link."""
    script = tmp_path / "hold.py"
    script.write_text(HOLD)
    flags = tmp_path / "flags"
    flags.mkdir()
    common = ["--num_machines", "2", "--num_processes", "2", "--cpu"]
    where = ["--main_process_ip", "192.0.2.1", "--main_process_port", "29515"]
    rest = ["--rdzv_backend", backend, str(script), str(flags)]
    commands = [["launch", *common, "--machine_rank", str(n), *where, *rest] for n in (0, 1)]
    before = [set(bed.listening(0)), set(bed.listening(1))]  # the kernels of other tests
    processes = _start(bed, commands, tmp_path)
    try:
        deadline = time.monotonic() + 120
        while len(list(flags.glob("holding*"))) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
            assert all(p.poll() is None for p in processes), "a launch ended early"
        listening = [bed.listening(0), bed.listening(1)]
    finally:
        (flags / "release").touch()
        outputs = _finish(processes)
    assert len(list(flags.glob("holding*"))) == 4, outputs
    ranks = [sorted(int(r) for r in re.findall(r"RANK (\d+) RELEASED", out)) for out in outputs]
    assert sorted(ranks) == [[0, 1], [2, 3]], outputs  # c10d numbers machines as they arrive
    for node, out in enumerate(outputs):
        addresses = {address for address, _ in set(listening[node]) - before[node]}
        assert addresses == {ADDRESSES[node]}, (listening[node], out[-3000:])
        assert SECOND[node] not in addresses
    assert ("192.0.2.1", 29515) in listening[0]
