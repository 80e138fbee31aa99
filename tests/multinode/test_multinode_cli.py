"""`nbaccel launch` across the two machines, with flags and with the FSDP guide's config file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from bed import REPO, Bed

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


def _on_both(bed: Bed, commands: list[list[str]], cwd: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NBACCEL_", "GLOO_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    processes = [
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
