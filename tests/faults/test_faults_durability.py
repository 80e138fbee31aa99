"""Checkpoints survive a power cut, an interrupted save cleans up, a crashed save's leftovers
are removed by the next save.

The power cut is simulated from the system calls of a real save (``strace``; see
crash_model.py): at the rename that publishes a checkpoint, a crash must find every file of
it with its data and its name on the disk; once the save returns, the checkpoint's own name
too. Every writer takes part: model, optimizer, scheduler, data loader sampler, registered
object, RNG states, a save over an existing checkpoint, ``Accelerator.save``, ``save_model``
in shards, FSDP2's sharded files (DCP) and their merged weights.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from crash_model import STRACE_ARGS, Disk, calls

from nbaccel import Accelerator
from nbaccel.testing import reset_state
from tests.support.paths import pythonpath

pytestmark = [pytest.mark.timeout(240)]

HERE = Path(__file__).resolve().parent
needs_strace = pytest.mark.skipif(
    shutil.which("strace") is None, reason="needs strace (apt-get install strace)"
)


def _traced(script: list[str], cwd: Path) -> tuple[str, str]:
    """Run ``python script...`` under strace; its stdout and the trace."""
    trace = cwd / "trace.txt"
    result = subprocess.run(
        [*STRACE_ARGS, "-o", str(trace), sys.executable, *script],
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=pythonpath()),  # the script imports tests.support
        capture_output=True,
        text=True,
        timeout=200,
    )
    if "ptrace" in result.stderr and result.returncode != 0:
        pytest.skip(f"strace cannot trace here: {result.stderr[-300:]}")
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout, trace.read_text()


def _files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def _is_publish(old: str, new: str, targets: set[str]) -> bool:
    return new in targets and Path(old).name.startswith(f".{Path(new).name}.staging-")


@needs_strace
def test_a_crash_after_publishing_finds_only_complete_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stdout, trace = _traced([str(HERE / "durability_target.py"), str(out)], tmp_path)
    found = json.loads(stdout.strip().splitlines()[-1])
    targets = set(found["published"])
    layout = {target: _files(Path(target)) for target in targets}
    disk, published = Disk(), []
    for call in calls(trace):
        if call.name.startswith("rename") and call.result == 0:
            old, new = call.strings()[:2]
            if _is_publish(old, new, targets):  # the crash: right after this rename
                files = [f"{old}/{name}" for name in layout[new]]
                disk.apply(call)
                moved = [f"{new}/{name}" for name in layout[new]]
                assert disk.lost(new, moved) == [], f"publishing {new} from {old}"
                published.append(new)
                assert files  # a checkpoint with files was checked
                continue
        disk.apply(call)
    assert sorted(published) == sorted(found["published"]), published  # 4 saves, 3 names
    # after the last save returned: every file written is on the disk under its name
    everything = [str(p) for p in out.rglob("*") if p.is_file()]
    assert len(everything) > 20, everything
    assert disk.lost(str(tmp_path), everything) == []


@needs_strace
def test_the_crash_model_finds_a_file_renamed_without_a_flush(tmp_path: Path) -> None:
    """The check above can fail: a staging directory published without fsync loses its
    file; with the file flushed but not its directory, the file's name is lost."""
    script = tmp_path / "unflushed.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, sys
            staging, target = {str(tmp_path / ".ck.staging-1")!r}, {str(tmp_path / "ck")!r}
            os.mkdir(staging)
            with open(staging + "/model.bin", "wb") as f:
                f.write(b"weights")
                if sys.argv[1] != "none":
                    f.flush(); os.fsync(f.fileno())
            os.rename(staging, target)
            """
        )
    )
    for flushed, lost in (("none", ["ck/model.bin"]), ("file", ["ck/model.bin"])):
        shutil.rmtree(tmp_path / "ck", ignore_errors=True)
        _, trace = _traced([str(script), flushed], tmp_path)
        disk = Disk()
        for call in calls(trace):
            disk.apply(call)
        files = [str(tmp_path / "ck" / "model.bin")]
        assert disk.lost(str(tmp_path / "ck"), files) == [str(tmp_path / n) for n in lost]
        if flushed == "file":
            assert str(tmp_path / "ck" / "model.bin") not in disk.dirty  # only its name is lost


class Interrupting:
    """A registered object whose state_dict raises: the interrupt arrives mid-save, after
    the weights and optimizer files were started."""

    def __init__(self, error: type[BaseException]) -> None:
        self.error = error

    def state_dict(self) -> dict[str, int]:
        raise self.error

    def load_state_dict(self, state: dict[str, int]) -> None:
        pass


def _accelerator() -> tuple[Accelerator, torch.nn.Module]:
    reset_state()
    acc = Accelerator(cpu=True)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer = acc.prepare(model, optimizer)
    return acc, model


def test_keyboard_interrupt_during_a_save_removes_its_staging_directory(tmp_path: Path) -> None:
    acc, _ = _accelerator()
    try:
        acc.save_state(tmp_path / "ck")
        before = _files(tmp_path / "ck")
        acc.register_for_checkpointing(Interrupting(KeyboardInterrupt))
        with pytest.raises(KeyboardInterrupt):
            acc.save_state(tmp_path / "ck")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]  # nothing hidden is left
        assert _files(tmp_path / "ck") == before  # the previous checkpoint is untouched
    finally:
        reset_state()


SIGTERM_SCRIPT = """
import sys, time
from pathlib import Path
import torch
from nbaccel import Accelerator

acc = Accelerator(cpu=True)
model = acc.prepare(torch.nn.Linear(64, 64))
acc.save_state(sys.argv[1])

def hold(models, weights, output_dir):
    print("SAVING", output_dir, flush=True)
    time.sleep(120)

acc.register_save_state_pre_hook(hold)
acc.save_state(sys.argv[1])
"""


def test_sigterm_during_a_save_removes_its_staging_directory_and_still_ends_the_process(
    tmp_path: Path,
) -> None:
    """SIGTERM is how the launcher stops a worker (a kernel interrupt, a failed peer)."""
    script = tmp_path / "held.py"
    script.write_text(SIGTERM_SCRIPT)
    target = tmp_path / "ck"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(target)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("SAVING"), line
        staging = Path(line.split()[1])
        assert staging.is_dir() and staging.name.startswith(".ck.staging-")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == -signal.SIGTERM  # it still dies of SIGTERM
    finally:
        proc.kill()
        proc.wait()
    assert not staging.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "held.py"]


def test_a_staging_directory_left_by_a_crashed_save_is_removed_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    left = tmp_path / ".ck.staging-0123456789ab"  # what a killed save leaves
    left.mkdir()
    (left / "model.safetensors").write_bytes(b"half")
    unrelated = tmp_path / ".other.staging-0123456789ab"
    unrelated.mkdir()
    acc, _ = _accelerator()
    try:
        with caplog.at_level(logging.WARNING, logger="nbaccel"):
            acc.save_state(tmp_path / "ck")
    finally:
        reset_state()
    assert not left.exists()
    assert unrelated.exists()  # another checkpoint's staging directory is not this save's
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(left) in w and "interrupted" in w for w in warnings), warnings
