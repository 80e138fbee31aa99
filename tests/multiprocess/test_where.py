"""Where is every rank? notebook_launcher names a stalled or diverged collective (real gloo
ranks, fork and spawn): the ranks that are not in it, with their lines, and the table."""

from __future__ import annotations

import faulthandler
import re
import sys
import time
from collections.abc import Iterator
from typing import Any

import launcher_helpers as h
import pytest
import where_targets as w

from nbaccel import StallError, WorkerError, notebook_launcher
from nbaccel.launch.parent.errors import LaunchTimeoutError

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]

STALL_S = 2.0
# the watch asks about once a second and answers come at once; a loaded machine gets room
REPORTED_WITHIN_S = STALL_S + 5.0
TARGETS = "where_targets.py"


def _at(marker: str) -> str:
    return f"{TARGETS}:{w.line_of(marker)}"


def _launch(function: Any, method: str, **kwargs: Any) -> list[Any]:
    options: dict[str, Any] = {"stall_timeout": STALL_S, "on_stall": "raise"}
    options.update(kwargs)
    return notebook_launcher(function, num_processes=2, cpu=True, start_method=method, **options)


def _stall(function: Any, method: str, **kwargs: Any) -> StallError:
    before = h.child_pids()
    with pytest.raises(StallError) as info:
        _launch(function, method, **kwargs)
    assert h.wait_no_children(before) == set(), "a rank was left running"
    return info.value


def _row(error: StallError, rank: int) -> dict[str, Any]:
    (row,) = [row for row in error.where if row["rank"] == rank]
    return row


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_rank_that_skips_the_collective_and_sleeps_is_named_with_its_line(method: str) -> None:
    error = _stall(w.skips_and_sleeps, method)
    text = str(error)
    assert error.kind == "stall" and isinstance(error, TimeoutError)
    assert re.match(r"a collective stalled: rank 0 has waited \d+ s in all_reduce", text), text
    assert (
        f"all_reduce (#1, {_at('all_reduce')}), and rank 1 never joined it: rank 1 is at "
        f"{_at('sleeps')}, in skips_and_sleeps: time.sleep(1e6)"
    ) in text, text
    waiting = _row(error, 0)
    assert waiting["state"] == "in collective" and waiting["collective"] == "all_reduce"
    assert waiting["shapes"] == [[4]] and waiting["dtypes"] == ["float32"]
    assert waiting["call_site"] == _at("all_reduce") and waiting["seq"] == 1
    assert STALL_S <= waiting["seconds"] <= REPORTED_WITHIN_S, waiting
    sleeping = _row(error, 1)  # (d): a rank inside time.sleep answers with its own frame
    assert sleeping["state"] == "running" and sleeping["where"] == _at("sleeps")
    assert sleeping["function"] == "skips_and_sleeps"
    assert sleeping["source"].startswith("time.sleep(1e6)")
    assert "Every rank was stopped" in text and "rank  host  state" in text


def test_a_queued_collective_whose_peer_never_joins_is_a_stall() -> None:
    """``async_op=True``: rank 0's all_reduce returned its Work and rank 0 went on; it is still
    named in the collective (queued) until the work completes, so the stall is found."""
    error = _stall(w.queues_and_sleeps, "fork")
    text = str(error)
    assert error.kind == "stall", text
    assert f"all_reduce (#1, {_at('queued')}), and rank 1 never joined it" in text, text
    queued = _row(error, 0)
    assert queued["collective"] == "all_reduce" and queued["queued"] is True, queued
    assert queued["where"] == _at("after queueing"), queued
    assert "all_reduce #1 float32[2] (queued)" in text, text
    assert _row(error, 1)["where"] == _at("never calls")


def test_a_rank_that_returns_without_the_collective_is_named_at_once() -> None:
    error = _stall(w.skips_and_returns, "fork", stall_timeout=60.0)
    assert error.kind == "divergence"
    assert str(error).startswith(
        "a collective diverged: rank 1 returned from skips_and_returns while rank 0 waits in "
        f"all_reduce (#1, {_at('all_reduce alone')})"
    ), str(error)
    assert _row(error, 0)["seconds"] <= REPORTED_WITHIN_S  # long before the 60 s stall
    assert _row(error, 1)["state"] == "returned"


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_ranks_in_different_collectives_are_named_at_once(method: str) -> None:
    error = _stall(w.gather_against_reduce, method, stall_timeout=60.0)
    text = str(error)
    assert error.kind == "divergence", text
    gather = f"all_gather (#1, {_at('all_gather')})"
    reduce = f"all_reduce (#1, {_at('all_reduce instead')})"
    assert (
        f"rank 1 called {gather} while rank 0 waits in {reduce}" in text
        or f"rank 0 called {reduce} while rank 1 waits in {gather}" in text
    ), text
    assert max(row["seconds"] for row in error.where) <= REPORTED_WITHIN_S


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_rank_spinning_in_python_is_named_with_its_line(method: str) -> None:
    error = _stall(w.spins_while_the_other_waits, method)
    text = str(error)
    assert "rank 0 has waited" in text and f"in barrier (#1, {_at('barrier')})" in text, text
    assert f"rank 1 is at {_at('spins')}, in spins_while_the_other_waits: while True:" in text
    assert _row(error, 1)["where"] == _at("spins")


@pytest.fixture
def quiet_abort() -> Iterator[None]:
    """gloo aborts a forked rank in this test: the crash report that pytest's faulthandler,
    inherited by the fork, would print is no output of the test's."""
    enabled = faulthandler.is_enabled()
    faulthandler.disable()
    yield
    if enabled:
        faulthandler.enable(file=sys.__stderr__)


@pytest.mark.usefixtures("quiet_abort")
def test_tensors_of_other_shapes_are_named_with_both_shapes() -> None:
    before = h.child_pids()
    with pytest.raises(WorkerError) as info:  # gloo aborts a rank: a failure, not a stall
        _launch(w.gathers_other_shapes, "fork", stall_timeout=60.0, on_stall="warn")
    assert h.wait_no_children(before) == set()
    error = info.value if isinstance(info.value, WorkerError) else info.value.__cause__
    text = str(error)
    assert "all_gather (#1)" in text, text
    assert f"rank 0 sends float32[2] ({_at('shapes')})" in text, text
    assert f"rank 1 sends float32[3] ({_at('shapes')})" in text, text


@pytest.mark.usefixtures("quiet_abort")
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_rank_killed_inside_a_collective_at_once_is_named_with_it(method: str) -> None:
    """No watch round can reach a rank gloo aborts at once: its note page names the call."""
    before = h.child_pids()
    with pytest.raises(WorkerError) as info:
        _launch(w.gathers_other_shapes_at_once, method, stall_timeout=None)
    assert h.wait_no_children(before) == set()
    error = info.value
    text = str(error)
    killed = [f for f in error.fates if f.signal_name == "SIGABRT"]
    assert killed, text
    for fate in killed:
        call = fate.collective
        assert call is not None and (call.op, call.seq, call.group) == ("all_gather", 1, "world")
        assert call.shapes == ((2 + fate.rank,),) and call.dtypes == ("float32",), call
        shown = f"killed by SIGABRT inside all_gather #1 on world with float32[{2 + fate.rank}]"
        assert shown in text, text


def test_a_stall_that_ends_is_reported_and_the_launch_goes_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    started = time.monotonic()
    assert _launch(w.late_joiner, "fork", on_stall="warn", args=(STALL_S + 4.0,)) == [0, 1]
    assert time.monotonic() - started < 60
    err = capsys.readouterr().err
    assert "nbaccel: a collective stalled: rank 0 has waited" in err, err
    assert f"rank 1 is at {_at('late')}, in late_joiner: time.sleep(delay)" in err, err
    assert "The run goes on" in err and err.count("a collective stalled") == 1


def test_no_watch_with_stall_timeout_none(capsys: pytest.CaptureFixture[str]) -> None:
    assert _launch(w.late_joiner, "fork", stall_timeout=None, args=(STALL_S + 1.0,)) == [0, 1]
    assert "stalled" not in capsys.readouterr().err


def test_a_timeout_shows_where_every_rank_was() -> None:
    before = h.child_pids()
    with pytest.raises(LaunchTimeoutError) as info:
        _launch(w.skips_and_sleeps, "fork", stall_timeout=None, timeout=4.0)
    assert h.wait_no_children(before) == set()
    text = str(info.value)
    assert "Where every rank was then:" in text, text
    assert _at("all_reduce") in text and "all_reduce #1 float32[4]" in text, text
    assert _at("sleeps") in text and "time.sleep(1e6)" in text, text
