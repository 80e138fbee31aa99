"""stall_timeout= and on_stall=: checked before anything starts, from the argument, the config
file or the default, on notebook_launcher, WorkerPool and ``%nbaccel start``."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

import nbaccel
from nbaccel import StallError, WorkerPool, notebook_launcher
from nbaccel.config import ConfigError, config_in_force
from nbaccel.config.schema import ConfigFile
from nbaccel.launch.config import DEFAULT_STALL_TIMEOUT, LaunchConfig


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("NBACCEL_CONFIG_FILE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)


def _use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(path))


def _children() -> list[int]:
    return [p.pid for p in psutil.Process().children(recursive=True)]


def test_the_default_is_300_seconds_and_warn() -> None:
    config = LaunchConfig.build(num_processes=2, cpu=True)
    assert config.stall_timeout == 300.0 and config.on_stall == "warn"
    assert DEFAULT_STALL_TIMEOUT == 300.0 and repr(DEFAULT_STALL_TIMEOUT) == "300.0"


@pytest.mark.parametrize(("value", "expected"), [(2, 2.0), (0.5, 0.5), (None, None)])
def test_a_positive_number_or_none_is_accepted(value: object, expected: float | None) -> None:
    assert LaunchConfig.build(num_processes=2, cpu=True, stall_timeout=value).stall_timeout == (
        expected
    )


@pytest.mark.parametrize(
    ("value", "error", "words"),
    [
        (0, ValueError, "stall_timeout=0 is not allowed; it must be a positive number"),
        (-5, ValueError, "stall_timeout=-5 is not allowed"),
        (True, TypeError, "stall_timeout must be a positive number of seconds or None"),
        ("60", TypeError, "got str ('60')"),
    ],
)
def test_a_bad_stall_timeout_names_the_argument(
    value: object, error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        LaunchConfig.build(num_processes=2, cpu=True, stall_timeout=value)


def test_a_bad_on_stall_says_what_is_allowed() -> None:
    with pytest.raises(
        ValueError, match=r"on_stall='ignore' is not allowed; use one of \['warn', "
    ):
        LaunchConfig.build(num_processes=2, cpu=True, on_stall="ignore")
    assert LaunchConfig.build(num_processes=2, cpu=True, on_stall="RAISE").on_stall == "raise"


def test_the_launcher_and_the_pool_refuse_before_starting_anything() -> None:
    before = _children()
    with pytest.raises(ValueError, match="stall_timeout=0"):
        notebook_launcher(print, num_processes=2, cpu=True, stall_timeout=0)
    with pytest.raises(ValueError, match="on_stall='later'"):
        notebook_launcher(print, num_processes=2, cpu=True, on_stall="later")
    with pytest.raises(TypeError, match="stall_timeout must be"):
        WorkerPool(2, cpu=True, stall_timeout=[1])  # type: ignore[arg-type]
    assert _children() == before


def test_the_config_file_sets_both_and_an_argument_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(tmp_path, monkeypatch, "stall_timeout: 45\non_stall: raise\n")
    config = LaunchConfig.build(num_processes=2, cpu=True, stall_timeout=DEFAULT_STALL_TIMEOUT)
    assert config.stall_timeout == 45.0 and config.on_stall == "raise"
    explicit = LaunchConfig.build(num_processes=2, cpu=True, stall_timeout=300.0, on_stall="warn")
    assert explicit.stall_timeout == 300.0 and explicit.on_stall == "warn"
    off = LaunchConfig.build(num_processes=2, cpu=True, stall_timeout=None)
    assert off.stall_timeout is None


def test_the_config_file_can_turn_the_watch_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(tmp_path, monkeypatch, "stall_timeout: null\n")
    config = LaunchConfig.build(num_processes=2, cpu=True, stall_timeout=DEFAULT_STALL_TIMEOUT)
    assert config.stall_timeout is None


@pytest.mark.parametrize("text", ["stall_timeout: -1\n", "stall_timeout: soon\n", "on_stall: x\n"])
def test_a_bad_key_in_the_file_names_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    _use(tmp_path, monkeypatch, text)
    with pytest.raises(ConfigError, match=text.split(":")[0]):
        config_in_force()


def test_a_file_written_with_the_defaults_leaves_the_keys_out() -> None:
    written = ConfigFile().to_dict()
    assert "stall_timeout" not in written and "on_stall" not in written
    changed = ConfigFile(stall_timeout=60, on_stall="raise").to_dict()
    assert changed["stall_timeout"] == 60.0 and changed["on_stall"] == "raise"


def test_stall_error_is_a_timeout_error_exported_at_the_top() -> None:
    assert issubclass(StallError, TimeoutError) and "StallError" in nbaccel.__all__
    error = StallError("stalled", "divergence", [{"rank": 0}])
    assert error.kind == "divergence" and error.where == [{"rank": 0}]


def test_the_magic_reads_the_options() -> None:
    pytest.importorskip("IPython")
    from IPython.core.error import UsageError

    from nbaccel.magics.arguments import parse_line

    options = parse_line("start -n 2 --stall_timeout none --on_stall raise")
    assert options.stall_timeout is None and options.on_stall == "raise"
    assert parse_line("start -n 2 --stall_timeout 30").stall_timeout == 30.0
    assert parse_line("start -n 2").stall_timeout is DEFAULT_STALL_TIMEOUT  # the file's, or 300
    assert parse_line("where").command == "where"
    with pytest.raises(UsageError, match="stall_timeout"):
        parse_line("start -n 2 --stall_timeout soon")
