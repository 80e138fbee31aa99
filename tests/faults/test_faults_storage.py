"""Point 5: storage faults. The disk fills up during save_state; checkpoint files are
truncated or corrupted after the save.

Truncated and garbled files are also covered, for some files, by tests/unit/test_checkpoint_state.py
(test_missing_file_is_named, test_truncated_file_is_named,
test_garbled_file_of_the_right_size_is_named); here every file of a checkpoint is damaged in
turn.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import fault_helpers as fh
import pytest

from nbaccel import WorkerError, notebook_launcher

pytestmark = [pytest.mark.timeout(90)]

DISK_BYTES = 1024 * 1024  # the small disk (tmpfs) or the largest file allowed (RLIMIT_FSIZE)
BIG_OBJECT = 2 * DISK_BYTES  # the registered object of the second save: it cannot fit


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[tuple[Path, int | None]]:
    """A 1 MiB tmpfs where it may be mounted (root, as here): (its path, None). Elsewhere a
    plain directory and the RLIMIT_FSIZE the workers set on themselves: (path, limit)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = (
        os.geteuid() == 0
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES},mode=0755", "tmpfs", mount_point],
            capture_output=True,
        ).returncode
        == 0
    )
    try:
        yield mount_point, None if mounted else DISK_BYTES
    finally:
        if mounted:
            subprocess.run(["umount", "-l", mount_point], check=True)


def _fill_the_disk(disk: Path, file_limit: int | None) -> tuple[BaseException, float]:
    started = time.monotonic()
    with pytest.raises(BaseException) as info:
        notebook_launcher(
            fh.save_until_the_disk_is_full,
            (str(disk / "project"), file_limit, BIG_OBJECT),
            num_processes=2,
            start_method="fork",
            timeout=60,
        )
    return info.value, time.monotonic() - started


def _worker_error(exc: BaseException) -> WorkerError:
    error = exc if isinstance(exc, WorkerError) else exc.__cause__
    assert isinstance(error, WorkerError), repr(exc)
    return error


@pytest.mark.multiprocess
def test_disk_filling_during_save_state_fails_the_run_and_keeps_the_last_checkpoint(
    small_disk: tuple[Path, int | None], record: Callable[..., None]
) -> None:
    """Promise: a save that runs out of space (ENOSPC on a 1 MiB tmpfs; EFBIG under
    RLIMIT_FSIZE where no tmpfs can be mounted) fails the launch promptly with a WorkerError
    naming the rank whose write failed, inside save_state; the previous checkpoint stays
    complete and loads; no process, descriptor or temporary file is left."""
    disk, file_limit = small_disk
    before = fh.Leftovers.take()
    exc, elapsed = _fill_the_disk(disk, file_limit)
    error = _worker_error(exc)
    assert error.rank in (0, 1) and "save_state" in error.remote_traceback
    assert f"rank {error.rank} failed" in str(error)
    assert elapsed < 15.0, elapsed
    assert not fh.wait_clean(before)
    root = disk / "project" / "checkpoints"
    assert fh.incomplete_checkpoints(root) == []
    assert [p.name for p in root.iterdir() if not p.name.startswith(".")] == ["checkpoint_0"]
    hidden = sorted(p.name for p in root.iterdir() if p.name.startswith("."))
    project = str(disk / "project")
    loaded = notebook_launcher(fh.load_small, (project,), num_processes=2, start_method="fork")
    expected = fh.small_weights(str(disk / "unused"))
    assert loaded == [(1, 1024, expected)] * 2
    record(
        seconds=round(elapsed, 2),
        mechanism="tmpfs" if file_limit is None else "RLIMIT_FSIZE",
        error=f"{type(exc).__name__}: {str(exc).splitlines()[0]}"[:200],
        hidden=hidden,
    )


@pytest.mark.multiprocess
def test_disk_full_error_names_the_reason_and_the_file(
    small_disk: tuple[Path, int | None],
) -> None:
    """Promise (a clear error): the message says the disk is full (or the file too large)
    and names the checkpoint file that could not be written."""
    disk, file_limit = small_disk
    error = _worker_error(_fill_the_disk(disk, file_limit)[0])
    reason = "No space left on device" if file_limit is None else "File too large"
    assert reason in error.message, error.message
    assert ".staging-" in error.message, error.message


@pytest.mark.multiprocess
def test_failed_save_removes_its_staging_directory(small_disk: tuple[Path, int | None]) -> None:
    """Promise (nothing left behind): a save that fails takes its partial files away."""
    disk, file_limit = small_disk
    _fill_the_disk(disk, file_limit)
    assert sorted(p.name for p in (disk / "project" / "checkpoints").iterdir()) == ["checkpoint_0"]


# -- damaged files --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint with every kind of file (1 process, in this process)."""
    project = tmp_path_factory.mktemp("pristine") / "project"
    acc, _ = fh._small_setup(str(project), fh.Blob(64))
    return Path(acc.save_state())


FILES = [
    "model.safetensors",
    "optimizer.safetensors",
    "custom_checkpoint_0.pkl",
    "random_states_0.pkl",
    "checkpoint.json",
]


def _copy(pristine: Path, tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "ck"
    shutil.copytree(pristine, target)
    return target


def _load(path: Path) -> None:
    acc, _ = fh._small_setup(str(path.parent / "project"), fh.Blob(1))
    acc.load_state(path)


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("damage", ["truncated", "garbled", "emptied"])
def test_damaged_checkpoint_file_is_refused_with_its_name(
    pristine: Path, tmp_path: Path, name: str, damage: str
) -> None:
    """Promise: loading a checkpoint with one damaged file raises an error that names that
    file (and loads nothing silently)."""
    path = _copy(pristine, tmp_path)
    data = (path / name).read_bytes()
    if damage == "truncated":
        (path / name).write_bytes(data[: len(data) // 2])
    elif damage == "garbled":  # same size, so the manifest's size check passes
        (path / name).write_bytes(bytes((b + 101) % 256 for b in data))
    else:
        (path / name).write_bytes(b"")
    with pytest.raises((ValueError, RuntimeError, FileNotFoundError)) as info:
        _load(path)
    assert str(path / name) in str(info.value), str(info.value)


def test_manifest_listing_a_missing_file_names_it(pristine: Path, tmp_path: Path) -> None:
    """Promise: a file the manifest lists but the directory lacks is named."""
    path = _copy(pristine, tmp_path)
    manifest = json.loads((path / "checkpoint.json").read_text())
    (path / "custom_checkpoint_0.pkl").unlink()
    assert "custom_checkpoint_0.pkl" in manifest["files"]
    with pytest.raises((FileNotFoundError, RuntimeError)) as info:
        _load(path)
    assert "custom_checkpoint_0.pkl" in str(info.value)
