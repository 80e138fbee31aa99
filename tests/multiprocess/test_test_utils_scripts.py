"""nbaccel.test_utils' scripts on 2 real gloo ranks: as Accelerate's tests run them
(``debug_launcher(script.main)``) and as files under ``nbaccel launch``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nbaccel import debug_launcher
from nbaccel.test_utils import (
    execute_subprocess_async,
    get_launch_command,
    path_in_accelerate_package,
    test_ops,
    test_script,
    test_sync,
)

pytestmark = pytest.mark.multiprocess

MAINS: dict[str, Callable[[], None]] = {
    "test_ops": test_ops.main,
    "test_sync": test_sync.main,
    "test_script": test_script.main,
}


@pytest.mark.parametrize("name", sorted(MAINS))
def test_script_passes_under_debug_launcher(name: str, capfd: pytest.CaptureFixture[str]) -> None:
    assert debug_launcher(MAINS[name]) == [None, None]
    assert f"{name}: all checks passed" in capfd.readouterr().out


def test_sync_passes_on_one_process(capfd: pytest.CaptureFixture[str]) -> None:
    debug_launcher(test_sync.main, num_processes=1)
    assert "test_sync: all checks passed" in capfd.readouterr().out


def test_a_script_file_passes_under_nbaccel_launch(
    subprocess_environ: Callable[..., dict[str, str]],
) -> None:
    script = path_in_accelerate_package("test_utils", "scripts", "test_ops.py")
    command = [*get_launch_command(num_processes=2, cpu=True, monitor_interval=0.1), str(script)]
    result = execute_subprocess_async(command, env=subprocess_environ(), timeout=240, quiet=True)
    assert "test_ops: all checks passed" in result.stdout
    assert sum("** reduce on 2 process(es)" in line for line in result.stdout) == 1  # rank 0 only
