"""Point 6: bad input at every public entry point.

A table (bad_input_cases.py) holds at least one wrong-type and one wrong-value case for every
parameter of notebook_launcher, debug_launcher, Accelerator, the plugins and kwargs handlers,
prepare, save_state / load_state, save_model, the command line and the config file. The
promise checked for each: a ValueError or TypeError (the command line: exit code 2) whose
message names the argument, and neither a process started (fork, subprocess and
multiprocessing are guarded) nor a file written (the working and temporary directories are
compared). Cases that show a bug are strict xfails whose reason says what is wrong.
"""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bad_input_cases import BUGS, CASES, CLI_BUGS, CLI_CASES, CONFIG_FILES, FILE_CASES, Case

from nbaccel import notebook_launcher

pytestmark = [pytest.mark.timeout(60), pytest.mark.filterwarnings("ignore::FutureWarning")]


class ProcessStarted(AssertionError):
    """A bad call tried to start a process."""


@pytest.fixture
def no_process_may_start(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every way nbaccel (or torch's agent) could start a process raises and is recorded."""
    started: list[str] = []

    def refuse(what: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            started.append(what)
            raise ProcessStarted(f"{what} was called")

        return call

    monkeypatch.setattr(os, "fork", refuse("os.fork"))
    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse("subprocess.Popen"))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse("Process.start"))
    yield started


def _tree(*roots: Path) -> set[str]:
    return {str(p) for root in roots for p in root.rglob("*")}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory (relative paths a bad call might write land here)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def _param(case: Case) -> Any:
    marks = (
        [pytest.mark.xfail(strict=True, reason=f"BUG: {BUGS[case.id]}")] if case.id in BUGS else []
    )
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_bad_argument_is_refused_naming_it_before_anything_starts(
    case: Case, workdir: Path, private_tempdir: Path, no_process_may_start: list[str]
) -> None:
    """Promise: ValueError/TypeError naming the argument; no process, no file."""
    if case.setup is not None:
        case.setup(workdir)
    before = _tree(workdir, private_tempdir)
    with pytest.raises(case.errors) as info:
        case.call(workdir)
    assert case.names in str(info.value), f"{type(info.value).__name__}: {info.value}"
    assert no_process_may_start == []
    assert _tree(workdir, private_tempdir) == before, "a file was written"


def _cli_param(case: tuple[str, list[str], str]) -> Any:
    name = case[0]
    marks = []
    if name in CLI_BUGS:
        marks = [pytest.mark.xfail(strict=True, reason=f"BUG: {CLI_BUGS[name]}")]
    return pytest.param(*case, id=name, marks=marks)


@pytest.fixture
def config_files(workdir: Path) -> Path:
    for name, text in CONFIG_FILES.items():
        (workdir / name).write_text(text)
    (workdir / "s.py").write_text("open('RAN', 'w').close()\n")
    return workdir


@pytest.mark.parametrize(("name", "argv", "names"), [_cli_param(c) for c in CLI_CASES])
def test_bad_command_line_exits_2_naming_the_option(
    name: str,
    argv: list[str],
    names: str,
    config_files: Path,
    private_tempdir: Path,
    no_process_may_start: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Promise: exit code 2, the option (or config key / file) named on stderr, nothing
    started or written. The command line runs in this process (nbaccel.cli.main.main)."""
    from nbaccel.cli.main import main

    monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(config_files / "none.yaml"))
    monkeypatch.setenv("HOME", str(config_files))
    before = _tree(config_files, private_tempdir)
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2, err[-1000:]
    assert names in err, err[-1000:]
    assert no_process_may_start == []
    assert _tree(config_files, private_tempdir) == before, "a file was written"


@pytest.mark.parametrize(("name", "file", "names"), FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_bad_config_file_is_refused_by_the_launcher_naming_the_key(
    name: str,
    file: str,
    names: str,
    config_files: Path,
    private_tempdir: Path,
    no_process_may_start: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Promise: notebook_launcher with a bad config file in force raises ValueError naming
    the file and the key, before anything starts."""
    monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(config_files / file))
    before = _tree(config_files, private_tempdir)
    with pytest.raises(ValueError, match=file.replace(".", "[.]")) as info:
        notebook_launcher(print)
    assert names in str(info.value)
    assert no_process_may_start == []
    assert _tree(config_files, private_tempdir) == before


def test_table_covers_at_least_sixty_cases() -> None:
    """The issue asks for at least 60 cases, a wrong type and a wrong value per parameter."""
    passing = [c for c in CASES if c.id not in BUGS]
    assert len(CASES) + len(CLI_CASES) + len(FILE_CASES) >= 60
    assert len(passing) >= 60
