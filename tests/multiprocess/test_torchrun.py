"""PartialState under torch's own launchers: torchrun and ``torch.distributed.launch --use-env``."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess

REPO = Path(__file__).resolve().parent.parent.parent
TIMEOUT_S = 120

# Each rank records what nbaccel sees. In "fail-first-attempt" mode every rank of the first
# attempt exits with code 3 so that the elastic agent restarts the group. They exit before
# joining the process group: torch 2.13's agent store keeps the gloo addresses of an attempt
# that had formed a group, and the next attempt then fails to connect (plain torch does too).
WORKER = textwrap.dedent(
    """
    import json
    import sys
    from pathlib import Path

    import torch.distributed as dist

    from nbaccel import PartialState
    from nbaccel.environment import read_launch_environment
    from nbaccel.state.registry import current_process

    out_dir = Path(sys.argv[1])
    fail_first_attempt = sys.argv[2] == "fail-first-attempt"
    if fail_first_attempt and read_launch_environment().restart_count == 0:
        sys.exit(3)
    state = PartialState()
    record = {
        "process_index": state.process_index,
        "num_processes": state.num_processes,
        "local_process_index": state.local_process_index,
        "local_num_processes": state.local_num_processes,
        "is_main_process": state.is_main_process,
        "distributed_type": str(state.distributed_type),
        "backend": state.backend,
        "device": str(state.device),
        "restart_count": state.restart_count,
        "launcher": current_process().launch.launcher,
        "dist_rank": dist.get_rank(),
        "dist_world": dist.get_world_size(),
    }
    indexes = [None] * state.num_processes
    dist.all_gather_object(indexes, state.process_index)
    record["gathered"] = indexes
    (out_dir / f"rank{state.process_index}.json").write_text(json.dumps(record))
    state.wait_for_everyone()
    state.destroy_process_group()
    """
)


def _launch(
    module_args: list[str],
    tmp_path: Path,
    port: int,
    environ: Callable[..., dict[str, str]],
    mode: str = "plain",
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    command = [
        sys.executable,
        "-m",
        *module_args,
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(port),
        str(script),
        str(out_dir),
        mode,
    ]
    env = environ(OMP_NUM_THREADS="1")
    try:
        done = subprocess.run(
            command, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"{' '.join(command)} timed out after {TIMEOUT_S}s\n{error.output}")
    return out_dir, done


def _records(out_dir: Path, done: subprocess.CompletedProcess[str]) -> list[dict]:
    detail = (
        f"exit {done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-6000:]}"
    )
    assert done.returncode == 0, detail
    files = sorted(out_dir.glob("rank*.json"))
    assert [f.name for f in files] == ["rank0.json", "rank1.json"], detail
    return [json.loads(f.read_text()) for f in files]


def _assert_two_cpu_ranks(records: list[dict], restart_count: int) -> None:
    for rank, record in enumerate(records):
        assert record["process_index"] == rank == record["dist_rank"], record
        assert record["num_processes"] == 2 == record["dist_world"], record
        assert record["local_process_index"] == rank, record
        assert record["local_num_processes"] == 2, record
        assert record["is_main_process"] is (rank == 0), record
        assert record["distributed_type"] == "MULTI_CPU", record
        assert record["backend"] == "gloo", record
        assert record["device"] == "cpu", record
        assert record["restart_count"] == restart_count, record
        # torch.distributed.launch runs on the elastic agent too, so both report "torchrun".
        assert record["launcher"] == "torchrun", record
        assert record["gathered"] == [0, 1], record


def test_torchrun(
    tmp_path: Path,
    free_port: Callable[[], int],
    subprocess_environ: Callable[..., dict[str, str]],
) -> None:
    out_dir, done = _launch(["torch.distributed.run"], tmp_path, free_port(), subprocess_environ)
    _assert_two_cpu_ranks(_records(out_dir, done), restart_count=0)


def test_torchrun_restart_count_after_a_restart(
    tmp_path: Path,
    free_port: Callable[[], int],
    subprocess_environ: Callable[..., dict[str, str]],
) -> None:
    out_dir, done = _launch(
        ["torch.distributed.run", "--max-restarts", "1"],
        tmp_path,
        free_port(),
        subprocess_environ,
        mode="fail-first-attempt",
    )
    _assert_two_cpu_ranks(_records(out_dir, done), restart_count=1)


@pytest.mark.skipif(
    importlib.util.find_spec("torch.distributed.launch") is None,
    reason="torch.distributed.launch no longer exists in this torch",
)
def test_torch_distributed_launch_use_env(
    tmp_path: Path,
    free_port: Callable[[], int],
    subprocess_environ: Callable[..., dict[str, str]],
) -> None:
    out_dir, done = _launch(
        ["torch.distributed.launch", "--use-env"], tmp_path, free_port(), subprocess_environ
    )
    _assert_two_cpu_ranks(_records(out_dir, done), restart_count=0)
