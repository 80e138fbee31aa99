"""A failing rank: the right rank and exception reach the cell, peers stop, nothing is left."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import launcher_helpers as h
import pytest

from nbaccel import WorkerError
from nbaccel.launch.parent.errors import LaunchTimeoutError, RankFate, root_cause

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(90)]

# Correctness bound, not a benchmark: a peer blocked in a collective must not hold the cell
# for its 300 s process-group timeout.
STOP_BOUND_S = 20.0


def _fate(error: WorkerError, rank: int) -> RankFate:
    (fate,) = [f for f in error.fates if f.rank == rank]
    return fate


@pytest.mark.parametrize("failing", [0, 1, 2])
def test_launcher_first_failing_rank_is_reported_with_original_type(
    failing: int, tmp_path: Path
) -> None:
    before = h.child_pids()
    started = time.monotonic()
    with pytest.raises(ValueError) as info:
        h.launch(h.fail_after_peers_wait, failing, str(tmp_path), num_processes=3)
    elapsed = time.monotonic() - started
    assert len(list(tmp_path.glob("entered*"))) == 2, "the peers never entered the all_reduce"

    exc = info.value
    assert type(exc) is ValueError
    assert str(exc) == f"boom {failing}"
    error = exc.__cause__
    assert isinstance(error, WorkerError)
    assert error.rank == failing
    assert error.local_rank == failing
    assert error.type_name == "ValueError"
    assert error.message == f"boom {failing}"
    assert "fail_after_peers_wait" in error.remote_traceback
    assert 'ValueError(f"boom {failing}")' in error.remote_traceback  # the raising line
    assert f"rank {failing}" in str(error)

    assert sorted(f.rank for f in error.fates) == [0, 1, 2]
    assert _fate(error, failing).state == "raised"
    assert root_cause(error.fates) is not None
    assert root_cause(error.fates).rank == failing  # type: ignore[union-attr]
    for fate in error.fates:
        if fate.rank == failing:
            continue
        # a peer was stopped by the launcher, or failed only because the failing rank left
        assert fate.state in ("stopped", "raised", "signalled"), fate
        if fate.state == "raised":
            assert fate.error is not None and fate.error.looks_like_peer_loss, fate
        assert f"rank   {fate.rank} (local {fate.rank}): raised ValueError" not in str(error)
    assert f"raised ValueError: boom {failing}" in str(error)  # the fate table names the cause
    assert elapsed < STOP_BOUND_S, f"peers were stopped only after {elapsed:.1f}s"
    h.assert_clean_then_next_launch_works(before)


def test_launcher_peers_failing_because_a_rank_left_are_not_the_cause(tmp_path: Path) -> None:
    before = h.child_pids()
    with pytest.raises(ValueError, match="boom 1") as info:
        h.launch(h.fail_while_peers_ignore_sigterm, 1, str(tmp_path), True, num_processes=3)
    error = info.value.__cause__
    assert isinstance(error, WorkerError)
    assert error.rank == 1
    for rank in (0, 2):  # SIGTERM ignored: they failed in the all_reduce by themselves
        fate = _fate(error, rank)
        assert fate.state == "raised", fate
        assert fate.error is not None and fate.error.looks_like_peer_loss, fate.error
    assert root_cause(error.fates).rank == 1  # type: ignore[union-attr]
    h.assert_clean_then_next_launch_works(before)


def test_launcher_peer_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    before = h.child_pids()
    started = time.monotonic()
    with pytest.raises(ValueError, match="boom 1") as info:
        h.launch(h.fail_while_peers_ignore_sigterm, 1, str(tmp_path), False)
    elapsed = time.monotonic() - started
    error = info.value.__cause__
    assert isinstance(error, WorkerError)
    assert _fate(error, 0).state == "stopped"
    assert _fate(error, 0).exit_code == -signal.SIGKILL
    assert elapsed < STOP_BOUND_S, f"a peer ignoring SIGTERM held the cell for {elapsed:.1f}s"
    h.assert_clean_then_next_launch_works(before)


@pytest.mark.parametrize(
    ("function", "class_name", "message"),
    [
        (h.raise_needs_two_args, "NeedsTwoArgs", "cannot rebuild me"),
        (h.raise_holds_lock, "HoldsLock", "cannot pickle me"),
    ],
    ids=["cannot-rebuild", "cannot-pickle"],
)
def test_launcher_exception_that_cannot_cross_falls_back_to_worker_error(
    function: object, class_name: str, message: str
) -> None:
    before = h.child_pids()
    with pytest.raises(WorkerError) as info:
        h.launch(function)
    error = info.value
    assert type(error) is WorkerError
    assert error.rank == 1
    assert error.type_name.endswith(class_name)
    assert error.message == message
    assert class_name in error.remote_traceback
    assert f"{class_name}: {message}" in str(error)
    h.assert_clean_then_next_launch_works(before)


def test_launcher_rank_killed_by_sigkill_is_reported() -> None:
    before = h.child_pids()
    with pytest.raises(WorkerError) as info:
        h.launch(h.die_in_barrier, "sigkill")
    error = info.value
    assert error.rank == 1
    assert "SIGKILL" in str(error)
    fate = _fate(error, 1)
    assert fate.state == "signalled"
    assert fate.exit_code == -signal.SIGKILL
    assert fate.signal_name == "SIGKILL"
    assert _fate(error, 0).state != "signalled" or _fate(error, 0).signal_name != "SIGKILL"
    h.assert_clean_then_next_launch_works(before)


def test_launcher_rank_exiting_with_code_3_is_reported() -> None:
    before = h.child_pids()
    with pytest.raises(WorkerError) as info:
        h.launch(h.die_in_barrier, "exit3")
    error = info.value
    assert error.rank == 1
    assert "exit" in str(error) and "code 3" in str(error)
    fate = _fate(error, 1)
    assert (fate.state, fate.exit_code) == ("exited", 3)
    h.assert_clean_then_next_launch_works(before)


def test_launcher_timeout_stops_a_hanging_rank_promptly() -> None:
    before = h.child_pids()
    started = time.monotonic()
    with pytest.raises(LaunchTimeoutError) as info:
        h.launch(h.hang_on_rank_one, timeout=3)
    elapsed = time.monotonic() - started
    error = info.value
    assert isinstance(error, TimeoutError)
    assert isinstance(error, WorkerError)
    assert error.rank == 1
    assert "rank(s) [1]" in str(error)
    assert "timeout=3" in str(error)
    assert _fate(error, 1).state == "timed out"
    assert _fate(error, 0).state == "returned"
    assert 3.0 <= elapsed < 3.0 + 10.0, f"timeout=3 returned after {elapsed:.1f}s"
    h.assert_clean_then_next_launch_works(before)


def test_launcher_failure_in_spawned_worker_keeps_original_type(tmp_path: Path) -> None:
    before = h.child_pids()
    with pytest.raises(ValueError, match="boom 1") as info:
        h.launch(h.fail_after_peers_wait, 1, str(tmp_path), start_method="spawn")
    assert isinstance(info.value.__cause__, WorkerError)
    assert info.value.__cause__.rank == 1
    h.assert_clean_then_next_launch_works(before)


# -- point 9: restarts --------------------------------------------------------------------------


def test_launcher_restart_recovers_after_one_failed_attempt(tmp_path: Path) -> None:
    events: list[object] = []
    results = h.launch(h.fail_first_attempt, str(tmp_path), max_restarts=2, on_event=events.append)
    assert results == [{"rank": 0, "restart_count": 1}, {"rank": 1, "restart_count": 1}]
    assert (tmp_path / "attempts1").read_text() == "xx"  # exactly two attempts, not three
    states = sorted(
        (e.restart_count, e.rank, e.state)  # type: ignore[attr-defined]
        for e in events
        if type(e).__name__ == "RankStateEvent"
    )
    running = [(n, r) for n, r, state in states if state == "running"]
    assert running == [(0, 0), (0, 1), (1, 0), (1, 1)]
    ended = {(n, r): state for n, r, state in states if state != "running"}
    assert ended[(0, 1)] == "failed"
    # rank 0 was waiting in the barrier: stopped by the launcher, or failed as the peer left
    assert ended[(0, 0)] in ("stopped", "failed")
    assert ended[(1, 0)] == ended[(1, 1)] == "returned"
    assert len(states) == 8


def test_launcher_restarts_exhausted_raise_the_last_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = h.child_pids()
    with pytest.raises(ValueError, match="attempt 2 fails") as info:
        h.launch(h.fail_every_attempt, str(tmp_path), max_restarts=2)
    assert (tmp_path / "attempts").read_text() == "xxx"  # 1 attempt + 2 restarts
    assert isinstance(info.value.__cause__, WorkerError)
    assert info.value.__cause__.rank == 1
    err = capsys.readouterr().err
    assert "1/2 restarts" in err and "2/2 restarts" in err
    h.assert_clean_then_next_launch_works(before)


def test_launcher_without_restarts_fails_on_first_attempt(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="first attempt fails"):
        h.launch(h.fail_first_attempt, str(tmp_path))
    assert (tmp_path / "attempts1").read_text() == "x"


def test_launcher_monitor_interval_is_accepted_and_used(tmp_path: Path) -> None:
    results = h.launch(h.fail_first_attempt, str(tmp_path), max_restarts=1, monitor_interval=0.5)
    assert [r["restart_count"] for r in results] == [1, 1]
    started = time.monotonic()
    with pytest.raises(LaunchTimeoutError):
        h.launch(h.hang_on_rank_one, timeout=1, monitor_interval=0.5)
    assert time.monotonic() - started < 1.0 + 0.5 + 8.0


# -- BaseException subclasses raised by a rank --------------------------------------------------


def test_launcher_rank_calling_sys_exit_is_reported_as_an_exception() -> None:
    before = h.child_pids()
    caught: BaseException | None = None
    try:
        h.launch(h.sys_exit_on_rank_one, 3)
    except BaseException as exc:  # SystemExit must not escape this test
        caught = exc
    assert h.wait_no_children(before) == set()
    assert caught is not None
    error = caught if isinstance(caught, WorkerError) else caught.__cause__
    assert isinstance(error, WorkerError) and error.rank == 1
    assert isinstance(caught, Exception), f"the cell raised {caught!r}, not an Exception"


def test_launcher_restarts_after_a_rank_calls_sys_exit() -> None:
    caught: BaseException | None = None
    results = None
    try:
        results = h.launch(h.sys_exit_on_first_attempt, max_restarts=1)
    except BaseException as exc:
        caught = exc
    assert caught is None, f"no restart: the cell raised {caught!r}"
    assert results == [1, 1]
