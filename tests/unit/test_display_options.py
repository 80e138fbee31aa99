"""display_ranks (argument, config file, panel), log handlers retargeted, the relay's drain and
torch's own rank prefix. The display channel itself is checked in real kernels
(tests/notebook/test_display_kernel.py)."""

from __future__ import annotations

import io
import logging
import os

import pytest

from nbaccel.config import ConfigFile
from nbaccel.config.ranks import parse_display_ranks
from nbaccel.config.values import ValueProblem
from nbaccel.launch.config import LaunchConfig
from nbaccel.launch.parent.relay import OutputRelay
from nbaccel.launch.worker.logstreams import retarget_log_handlers
from nbaccel.widgets.form import PanelValues, launch_options, validate
from nbaccel.widgets.hardware import Hardware


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, (0,)), ([1, 0, 1], (0, 1)), ("0, 2", (0, 2)), ("[1]", (1,)), ("ALL", None)],
)
def test_display_ranks_forms(value: object, expected: tuple[int, ...] | None) -> None:
    assert parse_display_ranks(value) == expected


@pytest.mark.parametrize("value", ["x", -1, [], True, [0, "a"], "1,,-2", 1.5])
def test_bad_display_ranks_say_what_is_allowed(value: object) -> None:
    with pytest.raises(ValueProblem, match="'all'"):
        parse_display_ranks(value)


def test_launcher_checks_display_ranks_before_starting() -> None:
    assert LaunchConfig.build(num_processes=2, cpu=True).display_ranks == (0,)
    assert LaunchConfig.build(num_processes=2, cpu=True, display_ranks="all").display_ranks is None
    with pytest.raises(ValueError, match=r"display_ranks=\[2\] names rank 2.*ranks 0\.\.1"):
        LaunchConfig.build(num_processes=2, cpu=True, display_ranks=[2])
    with pytest.raises(ValueError, match="display_ranks has the value 'first'"):
        LaunchConfig.build(num_processes=2, cpu=True, display_ranks="first")


def test_config_file_writes_display_ranks_only_when_not_default() -> None:
    assert "display_ranks" not in ConfigFile().to_dict()
    assert ConfigFile(display_ranks=[1, 0]).to_dict()["display_ranks"] == "0,1"
    with pytest.raises(ValueProblem, match="display_ranks"):
        ConfigFile(display_ranks="some")


def test_panel_field_validates_and_becomes_the_launch_argument() -> None:
    hardware = Hardware(cpu_cores=2, description="CPU (test, 2 cores)")
    values = PanelValues(num_processes=2, display_ranks="all")
    assert validate(values, hardware) == {}
    assert launch_options(values)["display_ranks"] == "all"
    assert values.to_config().display_ranks == "all"
    assert "display_ranks" not in launch_options(PanelValues(num_processes=2))
    assert "display_ranks" in validate(PanelValues(num_processes=2, display_ranks="2"), hardware)


def test_handlers_on_the_old_streams_write_to_the_new_ones() -> None:
    old_err, new_out, new_err, elsewhere = (io.StringIO() for _ in range(4))
    logger = logging.getLogger("nbaccel.test.retarget")
    moved = logging.StreamHandler(old_err)
    moved.flush = old_err.flush  # type: ignore[method-assign]  # as Transformers binds it
    kept = logging.StreamHandler(elsewhere)
    logger.addHandler(moved)
    logger.addHandler(kept)
    try:
        assert retarget_log_handlers({old_err: new_err}, new_out, new_err) == 1
        logger.warning("a line")
        assert moved.stream is new_err and moved.flush.__self__ is new_err  # type: ignore[attr-defined]
        assert new_err.getvalue() == "a line\n" and old_err.getvalue() == ""
        assert kept.stream is elsewhere and elsewhere.getvalue() == "a line\n"
    finally:
        logger.removeHandler(moved)
        logger.removeHandler(kept)


def test_drain_streams_a_ranks_lines_now_and_torch_lines_keep_one_prefix() -> None:
    out, err = io.StringIO(), io.StringIO()
    relay = OutputRelay({0: "[rank0]: "}, stdout=out, stderr=err)
    stdout_fd, stderr_fd = relay.child_fds(0)
    try:
        relay.start()
        os.write(stderr_fd, b"[rank0]:[W1124 reducer.cpp:1] Warning: x\nplain\n")
        relay.drain(0)
        assert err.getvalue() == "[rank0]:[W1124 reducer.cpp:1] Warning: x\n[rank0]: plain\n"
        os.write(stdout_fd, b"partial")
        relay.drain(0)
        assert out.getvalue() == ""  # not a whole line yet
    finally:
        relay.close(timeout=1.0)
    assert out.getvalue() == "[rank0]: partial\n"
