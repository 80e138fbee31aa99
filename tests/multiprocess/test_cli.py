"""``nbaccel launch`` and ``nbaccel test`` with real processes (CPU, gloo)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import cli_helpers as h
import pytest

pytestmark = pytest.mark.multiprocess

# Records what the script's Accelerator() sees and what the resolved config carries.
RECORDER = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    import torch
    from nbaccel import Accelerator
    from nbaccel.config import config_in_force

    def block_in_heap():  # a 24 MiB block: in the heap once malloc's thresholds are fixed
        address = torch.empty(24 << 20, dtype=torch.uint8).data_ptr()
        for line in open("/proc/self/maps"):
            low, high = (int(x, 16) for x in line.split()[0].split("-"))
            if low <= address < high:
                return line.split()[-1] == "[heap]"

    accelerator = Accelerator()
    rank = accelerator.process_index
    resolved = config_in_force(report=None)
    Path(sys.argv[1], f"rank{rank}.json").write_text(json.dumps({
        "num_processes": accelerator.num_processes,
        "mixed_precision": accelerator.mixed_precision,
        "device": str(accelerator.device),
        "fsdp": resolved.config.fsdp_config.to_dict() if resolved else None,
        "pid": os.getpid(),
        "block_in_heap": block_in_heap(),
    }))
    accelerator.wait_for_everyone()
    if len(sys.argv) > 2 and sys.argv[2] == "sleep":
        import time
        time.sleep(120)
    if len(sys.argv) > 2 and sys.argv[2] == "fail" and rank == 1:
        sys.exit(3)
    """
)


def _records(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "out").mkdir()
    (tmp_path / "recorder.py").write_text(RECORDER)
    return tmp_path


def test_the_guides_yaml_drives_a_two_process_launch(work: Path) -> None:
    # The file asks for 4 processes in total; the flag (per machine) wins: explicit > file.
    (work / "guide.yaml").write_text(h.GUIDE_YAML.replace("num_processes: 2", "num_processes: 4"))
    done = h.nbaccel(
        "launch", "--config_file", "guide.yaml", "--num_processes", "2",
        "recorder.py", str(work / "out"), home=work,
    )  # fmt: skip
    assert done.returncode == 0, h.detail(done)
    records = _records(work / "out")
    assert [r["num_processes"] for r in records] == [2, 2], h.detail(done)
    assert {r["mixed_precision"] for r in records} == {"bf16"}  # from the file
    assert {r["device"] for r in records} == {"cpu"}
    assert records[0]["fsdp"]["fsdp_sharding_strategy"] == "FULL_SHARD"  # carried through
    # the processes keep freed memory for reuse, as a notebook's ranks do (glibc's variables)
    assert [r["block_in_heap"] for r in records] == [True, True]


def test_a_bad_malloc_tuning_value_is_refused_before_any_process(work: Path) -> None:
    done = h.nbaccel(
        "launch", "--num_processes", "2", "--cpu", "recorder.py", str(work / "out"),
        home=work, NBACCEL_MALLOC_TUNING="sometimes",
    )  # fmt: skip
    assert done.returncode == 2, h.detail(done)
    assert "nbaccel launch: Environment variable NBACCEL_MALLOC_TUNING='sometimes'" in done.stderr
    assert _records(work / "out") == []


def test_a_failing_scripts_exit_code_is_the_commands(work: Path) -> None:
    # No `if __name__ == "__main__":`, so the launcher calls main_training_function (train).
    (work / "plain.py").write_text(
        "import sys\nfrom pathlib import Path\nfrom nbaccel import Accelerator\n\n"
        "def train():\n"
        "    rank = Accelerator().process_index\n"
        "    Path(sys.argv[1], f'called{rank}').write_text('yes')\n"
        "    if rank == 1:\n        sys.exit(3)\n"
    )
    done = h.nbaccel(
        "launch", "--num_processes", "2", "--cpu", "--main_training_function", "train",
        "plain.py", str(work / "out"), home=work,
    )  # fmt: skip
    assert done.returncode == 3, h.detail(done)
    assert "rank 1" in done.stderr and "exit code 3" in done.stderr
    assert (work / "out" / "called1").exists()


def test_sigint_to_the_launcher_leaves_no_process_behind(work: Path) -> None:
    command = [sys.executable, "-m", "nbaccel", "launch", "--num_processes", "2", "--cpu"]
    launcher = subprocess.Popen(
        [*command, "recorder.py", str(work / "out"), "sleep"],
        cwd=work,
        env=h.cli_environ(work),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + h.TIMEOUT_S
    while len(list((work / "out").glob("rank*.json"))) < 2:
        assert launcher.poll() is None and time.monotonic() < deadline, launcher.stdout
        time.sleep(0.2)
    time.sleep(0.5)
    pids = [r["pid"] for r in _records(work / "out")]
    launcher.send_signal(signal.SIGINT)
    output, _ = launcher.communicate(timeout=60)
    assert launcher.returncode == 130, output
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_two_machines_over_loopback(work: Path, free_port: Callable[[], int]) -> None:
    port = str(free_port())
    common = ["launch", "--num_machines", "2", "--main_process_ip", "127.0.0.1"]
    common += ["--main_process_port", port, "--num_processes", "1", "--cpu"]
    script = ["recorder.py", str(work / "out")]
    other = subprocess.Popen(
        [sys.executable, "-m", "nbaccel", *common, "--machine_rank", "1", *script],
        cwd=work,
        env=h.cli_environ(work),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    done = h.nbaccel(*common, "--machine_rank", "0", *script, home=work)
    other_out, _ = other.communicate(timeout=h.TIMEOUT_S)
    assert done.returncode == 0, h.detail(done)
    assert other.returncode == 0, other_out
    assert [r["num_processes"] for r in _records(work / "out")] == [2, 2]


def test_a_taken_port_on_machine_0_is_named(work: Path) -> None:
    """Promise: when machine 0's port is taken, `nbaccel launch` ends at once with exit code 1
    and a message naming the port and --main_process_port (no traceback, no process left)."""
    with socket.create_server(("127.0.0.1", 0)) as blocker:
        port = str(blocker.getsockname()[1])
        done = h.nbaccel(
            *("launch", "--num_machines", "2", "--machine_rank", "0", "--num_processes", "1"),
            *("--cpu", "--main_process_ip", "127.0.0.1", "--main_process_port", port),
            *("recorder.py", str(work / "out")),
            home=work,
        )
    said = done.stdout + done.stderr
    assert done.returncode == 1, h.detail(done)
    assert f"port {port} on 127.0.0.1 (machine 0, master_addr) is already in use" in said, said
    assert "--main_process_port" in said and "Traceback" not in said, said
    assert not _records(work / "out")


def test_nbaccel_test_passes_and_fails_visibly_with_the_switch(work: Path) -> None:
    default = work / ".cache" / "nbaccel" / "default_config.yaml"  # HOME is `work`
    default.parent.mkdir(parents=True)
    default.write_text("num_processes: 2\nuse_cpu: true\n")
    done = h.nbaccel("test", home=work)
    assert done.returncode == 0, h.detail(done)
    assert "PASS training = one-process reference" in done.stdout
    assert "nbaccel test: PASSED (2 process(es)" in done.stdout, h.detail(done)
    failed = h.nbaccel("test", home=work, NBACCEL_TEST_FAIL_RANK="1")
    assert failed.returncode == 1, h.detail(failed)
    assert "failing on purpose (NBACCEL_TEST_FAIL_RANK=1)" in failed.stdout
    assert "nbaccel test: FAILED" in failed.stdout
