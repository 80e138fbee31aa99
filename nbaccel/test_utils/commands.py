"""Running launch commands and other programs from tests, and finding nbaccel's files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from ..utils import parse_choice_from_env
from .requirements import device_count

__all__ = [
    "DEFAULT_LAUNCH_COMMAND",
    "SubprocessCallException",
    "execute_subprocess_async",
    "get_launch_command",
    "get_torch_dist_unique_port",
    "path_in_accelerate_package",
    "path_in_nbaccel_package",
    "pytest_xdist_worker_id",
    "run_command",
]

_PACKAGE = Path(__file__).resolve().parent.parent


def get_launch_command(**kwargs: Any) -> list[str]:
    """The ``nbaccel launch`` command with ``kwargs`` as its options.

    It runs nbaccel with this interpreter (``python -m nbaccel launch``), so the nbaccel a test
    imports is the one that launches. ``True`` gives a bare flag, ``None`` and ``False`` leave
    the option out, any other value gives ``--key=value``::

        get_launch_command(num_processes=2, cpu=True)
        # [sys.executable, "-m", "nbaccel", "launch", "--num_processes=2", "--cpu"]
    """
    command = [sys.executable, "-m", "nbaccel", "launch"]
    for key, value in kwargs.items():
        if value is True:
            command.append(f"--{key}")
        elif value is not None and value is not False:
            command.append(f"--{key}={value}")
    return command


DEFAULT_LAUNCH_COMMAND = get_launch_command(num_processes=device_count, monitor_interval=0.1)


class SubprocessCallException(Exception):
    """A command run by :func:`run_command` failed; the message holds its output."""


class _RunOutput:
    """What :func:`execute_subprocess_async` returns: the exit code and the output lines."""

    def __init__(self, returncode: int, stdout: list[str], stderr: list[str]) -> None:
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


def _pump(stream: IO[bytes], sink: list[str], echo: IO[str] | None, label: str) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace").rstrip()
        sink.append(line)
        if echo is not None:
            print(label, line, file=echo, flush=True)


def execute_subprocess_async(
    cmd: Sequence[str | os.PathLike[str]],
    env: Mapping[str, str] | None = None,
    stdin: int | IO[Any] | None = None,
    timeout: float | None = 180,
    quiet: bool = False,
    echo: bool = True,
) -> _RunOutput:
    """Run ``cmd``, streaming its output as it comes, and return its exit code and lines.

    Args:
        cmd: the program and its arguments (paths are turned into strings).
        env: the environment (default: this process's).
        stdin: passed to :class:`subprocess.Popen`.
        timeout: seconds to wait; the command is killed after that (None: no limit).
        quiet: do not print the command's output.
        echo: print the command line first.

    Raises:
        RuntimeError: the command exited with a non-zero code (the message has its stderr),
            or ran past ``timeout``.
    """
    args = [os.fspath(part) for part in cmd]
    if echo:
        print("\nRunning: ", " ".join(args), flush=True)
    process = subprocess.Popen(
        args, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    out: list[str] = []
    err: list[str] = []
    assert process.stdout is not None and process.stderr is not None
    readers = [
        threading.Thread(target=_pump, args=(process.stdout, out, None if quiet else sys.stdout,
                                              "stdout:"), daemon=True),
        threading.Thread(target=_pump, args=(process.stderr, err, None if quiet else sys.stderr,
                                              "stderr:"), daemon=True),
    ]  # fmt: skip
    for reader in readers:
        reader.start()
    try:
        returncode = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise RuntimeError(
            f"'{' '.join(args)}' did not finish within {timeout} s and was killed. Its last "
            f"output:\n" + "\n".join((out + err)[-40:]) + "\nPass a larger timeout= if it "
            "needs longer."
        ) from None
    for reader in readers:
        reader.join(timeout=10)
    if returncode != 0:
        raise RuntimeError(
            f"'{' '.join(args)}' failed with returncode {returncode}\n\n"
            f"The combined stderr from workers follows:\n" + "\n".join(err)
        )
    return _RunOutput(returncode, out, err)


def run_command(
    command: Sequence[str | os.PathLike[str]],
    return_stdout: bool = False,
    env: Mapping[str, str] | None = None,
) -> str | None:
    """Run ``command`` to its end; return its output (stdout and stderr) if ``return_stdout``.

    Raises:
        SubprocessCallException: the command exited with a non-zero code; the message holds
            its output.
    """
    args = [os.fspath(part) for part in command]
    try:
        output = subprocess.check_output(args, stderr=subprocess.STDOUT, env=env)
    except subprocess.CalledProcessError as error:
        raise SubprocessCallException(
            f"Command `{' '.join(args)}` failed with the following error:\n\n"
            f"{error.output.decode(errors='replace')}"
        ) from error
    return output.decode(errors="replace") if return_stdout else None


def path_in_nbaccel_package(*components: str) -> Path:
    """A path inside the installed nbaccel package, e.g. ``("test_utils", "scripts")``."""
    return _PACKAGE.joinpath(*components)


def path_in_accelerate_package(*components: str) -> Path:
    """A path inside the nbaccel package: the name Accelerate's tests use for its own files.

    ``path_in_accelerate_package("test_utils", "scripts", "test_script.py")`` is nbaccel's
    test script, which runs under ``nbaccel launch``.
    """
    return path_in_nbaccel_package(*components)


def pytest_xdist_worker_id() -> int:
    """The number of this pytest-xdist worker (``gw3`` -> 3); 0 without pytest-xdist."""
    worker = parse_choice_from_env("PYTEST_XDIST_WORKER", "gw0")
    found = re.fullmatch(r"gw(\d+)", worker)
    return int(found.group(1)) if found else 0


def get_torch_dist_unique_port() -> int:
    """A rendezvous port for a launch started by this test: 29500 plus the xdist worker's
    number, so that concurrent pytest-xdist workers do not pick the same one."""
    return 29500 + pytest_xdist_worker_id()
