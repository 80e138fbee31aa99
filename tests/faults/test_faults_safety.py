"""Point 7: safety. Loopback only, checkpoints that never run code, and temporary files.

- Listening sockets: test_launcher_listens_on_loopback_only in
  tests/multiprocess/test_launcher_ports.py (after one collective), and
  test_training_traffic_stays_on_loopback in test_faults_workers.py (every socket during DDP
  training).
- nbaccel's notebook launcher hands functions, arguments and results to the workers through
  pipes (fork: inherited memory; spawn: the child's stdin), never through files: a launch
  creates no temporary file at all, which is checked here while the workers run and after.
- Checkpoint staging directories are the only temporary files nbaccel writes; the CLI's
  resolved config file is the other one (nbaccel launch).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import fault_helpers as fh
import pytest
import torch

from nbaccel import WorkerError, notebook_launcher

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(90)]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_launch_creates_no_temporary_file(
    method: str, private_tempdir: Path, record: Callable[..., None]
) -> None:
    """Promise: functions and results travel through pipes: while the workers run and after,
    the temporary directory and /dev/shm hold nothing new, and neither the launcher nor a
    worker has a file open there."""
    before = fh.Leftovers.take()
    results = notebook_launcher(fh.temp_entries_while_running, num_processes=2, start_method=method)
    for result in results:
        assert result == {"temp": [], "shm": sorted(before.shm), "open": []}, result
    assert not fh.wait_clean(before)
    assert list(private_tempdir.iterdir()) == []
    record(method=method, temp_entries_during=results[0]["temp"])


def test_checkpoint_staging_directory_follows_the_umask_and_is_removed(tmp_path: Path) -> None:
    """Promise: the staging directory (the only temporary files nbaccel's checkpointing
    writes) is created with the process's umask, like the checkpoint it becomes, is renamed
    into place on success, and leaves no hidden entry or partial file."""
    umask = os.umask(0o022)
    os.umask(umask)
    results = notebook_launcher(
        fh.save_and_watch_staging, (str(tmp_path / "p"),), num_processes=2, start_method="fork"
    )
    for seen in results:
        assert seen["name"].startswith(".checkpoint_0.staging-")
        assert seen["mode"] == 0o777 & ~umask == seen["final_mode"], seen
        assert seen["entries"] == ["checkpoint_0"], seen
        assert seen["partial"] == []


@pytest.mark.parametrize(
    ("name", "safe"),
    [("custom_checkpoint_0.pkl", True), ("pytorch_model.bin", False), ("scheduler-less", True)],
    ids=["registered-object", "pickled-weights", "raw-pickle-optimizer"],
)
def test_crafted_pickle_in_a_checkpoint_is_refused_and_never_runs(
    name: str, safe: bool, tmp_path: Path
) -> None:
    """Promise: loading a checkpoint (2 ranks) whose file holds a pickle that would run
    ``touch sentinel`` fails with an error naming the file, and the sentinel never appears.
    (tests/unit/test_checkpoint_state.py::test_crafted_pickle_never_runs covers
    optimizer.bin, random_states_0.pkl and dl_state_dict.bin in one process.)"""
    acc, _ = fh._small_setup(str(tmp_path / "unused"), fh.Blob(8))
    path = Path(acc.save_state(tmp_path / "ck", safe_serialization=safe))
    sentinel = tmp_path / "pwned"
    if name == "scheduler-less":  # a raw pickle (no torch.save zip) in optimizer.bin
        name = "optimizer.bin"  # the torch.save format (safe_serialization=False, or older)
        (path / "optimizer.safetensors").unlink()
        (path / name).write_bytes(pickle.dumps(fh.Evil(str(sentinel)), protocol=2))
    else:
        torch.save({"state": fh.Evil(str(sentinel))}, path / name)
    _load_on_two_ranks_refused(path, f"Refusing to load {path / name}", sentinel)


def _load_on_two_ranks_refused(path: Path, message: str, sentinel: Path) -> None:
    """Refresh the manifest's sizes (so only the content is wrong), load the checkpoint on 2
    ranks: a WorkerError carrying ``message``, and the crafted payload never ran."""
    manifest = json.loads((path / "checkpoint.json").read_text())
    manifest["files"] = {p.name: p.stat().st_size for p in path.iterdir() if p.suffix != ".json"}
    (path / "checkpoint.json").write_text(json.dumps(manifest))  # the size check passes
    from nbaccel.testing import reset_state

    reset_state()
    with pytest.raises(BaseException) as info:
        notebook_launcher(fh.load_crafted, (str(path),), num_processes=2, start_method="fork")
    error = info.value if isinstance(info.value, WorkerError) else info.value.__cause__
    assert isinstance(error, WorkerError), repr(info.value)
    assert message in str(error), str(error)[-1500:]
    assert not sentinel.exists(), "the crafted pickle ran"


@pytest.mark.parametrize("how", ["raw-pickle", "torch.save", "pickle-in-metadata"])
def test_crafted_optimizer_safetensors_is_refused_and_never_runs(how: str, tmp_path: Path) -> None:
    """Promise: an ``optimizer.safetensors`` (the optimizer's format since it left
    ``torch.save``) that holds a pickle which would run ``touch sentinel`` (as the whole file,
    as a torch.save zip, or inside the file's JSON metadata, in place of the state structure)
    fails to load on 2 ranks with an error naming the file; the sentinel never appears. The
    reader parses JSON and copies bytes; nothing in the file is ever unpickled."""
    acc, _ = fh._small_setup(str(tmp_path / "unused"), fh.Blob(8))
    path = Path(acc.save_state(tmp_path / "ck"))
    target = path / "optimizer.safetensors"
    sentinel = tmp_path / "pwned"
    payload = pickle.dumps(fh.Evil(str(sentinel)), protocol=2)
    if how == "raw-pickle":
        target.write_bytes(payload)
    elif how == "torch.save":
        torch.save({"state": fh.Evil(str(sentinel))}, target)
    else:
        from nbaccel.checkpoint.files import save_tensors
        from nbaccel.checkpoint.optimizer_files import STATE_KEY

        skeleton = {"D": [["state", {"P": payload.hex()}], ["param_groups", {"L": []}]]}
        save_tensors({"x": torch.ones(1)}, target, metadata={STATE_KEY: json.dumps(skeleton)})
    _load_on_two_ranks_refused(path, f"The checkpoint file {target} is corrupt", sentinel)


def test_cli_launch_config_file_is_private_and_removed(tmp_path: Path) -> None:
    """Promise: ``nbaccel launch`` hands the resolved settings to the script in a temporary
    directory of mode 0700 (so the file is readable by the user only) and removes it when
    the script ends."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    script = tmp_path / "report.py"
    script.write_text(
        "import json, os, stat\n"
        "p = os.environ['NBACCEL_CONFIG_FILE']\n"
        "mode = lambda q: stat.S_IMODE(os.stat(q).st_mode)\n"
        "print('CFG ' + json.dumps([p, mode(p), mode(os.path.dirname(p))]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NBACCEL_", "RANK"))}
    env.update(TMPDIR=str(tmpdir), NBACCEL_CONFIG_FILE=str(tmp_path / "none.yaml"))
    done = subprocess.run(
        [sys.executable, "-m", "nbaccel", "launch", "--cpu", "--num_processes", "1", str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("CFG ")]
    path, file_mode, dir_mode = json.loads(line[4:])
    assert Path(path).parent.parent == tmpdir
    assert dir_mode == 0o700 and file_mode & 0o022 == 0, (oct(dir_mode), oct(file_mode))
    assert list(tmpdir.iterdir()) == [], "the resolved config was left behind"
