"""The benchmark suite still runs: each benchmark end to end with tiny settings.

The figures of such a run mean nothing (``--quick``); what is checked is that every benchmark
finishes, prints its table, and writes nothing. CI does not install the ``bench`` extra, so the
smoke run leaves the peers out (``--no-peers``: nbaccel and the plain-torch baselines only);
a real run without ``--no-peers`` fails when a peer is missing. The hosts that run the launch
subjects must turn a failing subject into an error that names it and quotes its output.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import harness
from benchmarks.hosts import HostError, ScriptHost, host_environment

pytestmark = pytest.mark.multiprocess

ROOT = Path(__file__).resolve().parents[2]


def _written_files() -> dict[str, str]:
    paths = [ROOT / "docs" / "benchmarks.md", *sorted((ROOT / "benchmarks" / "results").glob("*"))]
    paths += sorted((ROOT / "docs" / "img").glob("*.png"))
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


def test_new_benchmarks_run_end_to_end_with_nbaccels_own_subjects() -> None:
    before = _written_files()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "ddp_throughput",
            "launch_latency",
            "collectives",
            "scaling",
            "gpt_bf16",
            "fsdp_memory",
            "deepspeed",
            "pool",
            "where_overhead",
            "--quick",
            "--no-peers",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout
    assert done.returncode == 0, f"{out[-4000:]}\n{done.stderr[-4000:]}"
    # training overhead: nbaccel and the hand-written loop trained alike (checked inside)
    assert "nbaccel / hand-written DDP = " in out
    # launch latency, in a script and in a kernel, and the first output line in the kernel
    assert "### In a script" in out and "### In a Jupyter kernel" in out
    assert "### Time to the first output line (in a Jupyter kernel)" in out
    assert out.count("| nbaccel fork |") == 3 and out.count("| torch start_processes fork |") == 3
    # collectives: gather_for_metrics gave back exactly the evaluation set (checked inside)
    assert "| nbaccel Accelerator | " in out and "Collectives on an evaluation set" in out
    # scaling at 1 and 2 processes; the GPU benchmark says it did not run
    assert "| 1 | " in out and "| 2 | 1 | nbaccel Accelerator |" in out
    assert "## GPT bf16 on one GPU (`gpt_bf16`)\n\nNot run: no CUDA GPU" in out
    # FSDP FULL_SHARD holds half of DDP's bytes on 2 processes
    assert "FSDP / DDP memory 0.500x (meets the 0.55x target)" in out
    # DeepSpeed: nbaccel's ZeRO engines and hand-written ones under torchrun trained alike,
    # with the same settings (checked inside); ZeRO-3 holds far less than DDP per rank
    for stage in ("ZeRO-2", "ZeRO-3"):
        assert f"nbaccel Accelerator, {stage} / hand-written DeepSpeed, {stage} = " in out
    zero3 = re.search(r"ZeRO-3 / DDP bytes per rank = (\d\.\d+)x", out)
    assert zero3 is not None and float(zero3.group(1)) < 0.7, out[-3000:]
    # the pool: started in a kernel, warm cells by the client and the call inside the kernel
    assert "### Time to a ready pool" in out and "| nbaccel %%nbaccel cell |" in out
    assert out.count("| nbaccel pool.run(lambda: 1) |") == 2
    # the watch over the ranks, on and off: both trained alike (checked inside)
    assert "watch on / off = " in out
    assert _written_files() == before, "--quick / --no-peers must write nothing"


def test_the_gpt_bf16_benchmark_trains_the_same_model_in_every_subject() -> None:
    """Its code path on the CPU with a tiny model (the figures mean nothing there): every
    subject reaches the same first loss (checked inside) and gets a row."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "gpt_bf16", "--gpt_device", "cpu", "--no-peers"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    for label in ("hand-written torch.autocast bf16", "nbaccel Accelerator bf16"):
        assert f"| {label} | " in done.stdout, done.stdout
    assert "Where the hand-written step's time goes: forward and backward" in done.stdout


def test_a_missing_peer_fails_the_run_with_the_install_command() -> None:
    with pytest.raises(SystemExit, match=r"not-a-real-peer-xyz.*pip install -e '\.\[bench\]'"):
        harness.require("torch", "not-a-real-peer-xyz")


def test_a_subject_that_fails_or_dies_is_an_error_naming_it() -> None:
    env = host_environment()
    host = ScriptHost("subject A", env)
    try:
        assert host.run("x = 40 + 2", "x").value == 42
        with pytest.raises(HostError, match=r"(?s)subject A: the cell failed.*ValueError: boom"):
            host.run("raise ValueError('boom')")
        assert host.run("", "x").value == 42  # the host survives its cell's failure
        # a handler that a cell leaves behind (as torch-elastic's are) is put back after it
        host.run("import signal\nsignal.signal(signal.SIGTERM, lambda *args: None)")
        assert host.run("", "signal.getsignal(signal.SIGTERM) == signal.SIG_DFL").value
        with pytest.raises(HostError, match=r"(?s)subject A: the cell did not finish within 1 s"):
            host.run("import time\nprint('still going', flush=True)\ntime.sleep(30)", timeout=1)
    finally:
        host.close()
    host = ScriptHost("subject B", env)
    try:
        with pytest.raises(HostError, match=r"(?s)subject B: .*exit status 3.*last words"):
            host.run("import os\nprint('last words', flush=True)\nos._exit(3)")
    finally:
        host.close()
    host = ScriptHost("subject C", env)
    try:
        with pytest.raises(HostError, match=r"subject C: .*killed by signal 9"):
            host.run("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    finally:
        host.close()
