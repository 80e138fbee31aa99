"""The dashboard fed by the events, lines and pids of real 2-process launches."""

from __future__ import annotations

import io
import threading
import time

import dashboard_helpers as d
import launcher_helpers as h
import pytest

from nbaccel import WorkerError, notebook_launcher
from nbaccel.launch.parent.errors import LaunchStopped
from nbaccel.widgets import TextDashboard
from nbaccel.widgets.dashboard import LaunchDashboard

pytestmark = pytest.mark.multiprocess


@pytest.mark.timeout(120)
def test_widget_dashboard_shows_both_ranks_finished_with_output_progress_memory() -> None:
    board = LaunchDashboard(refresh_s=0.1)
    seen: list[object] = []
    results = notebook_launcher(
        d.train_with_progress, num_processes=2, cpu=True, dashboard=board, on_event=seen.append
    )
    assert results == [0, 1]
    assert seen, "the user's on_event was not chained"
    state = board.state
    assert state.outcome == "finished" and board.status == "finished"
    assert [v.state for v in state.ranks.values()] == ["finished", "finished"]
    for rank, view in state.ranks.items():
        assert f"hello from rank {rank}" in view.lines
        assert f"rank {rank} done" in view.lines
        assert view.n == d.STEPS and view.total == d.STEPS
        assert view.rate is not None and view.rate > 0
        assert view.metrics["loss"] == pytest.approx(1.0 / d.STEPS)
        assert view.pid is not None and view.pid > 0
        assert view.rss is not None and view.rss > 10 * 1024 * 1024
    bar_lines = [line for line in state.ranks[0].lines if "train:" in line]
    assert len(bar_lines) == 1, "rank 0's tqdm redraws should be one line in its tab"
    assert state.main_bar == (d.STEPS, d.STEPS, "train")  # from rank 0's tqdm
    assert not any("train:" in line for line in state.ranks[1].lines)
    table = board._table.value
    assert table.count(">finished<") == 2
    assert board._outputs.get_title(1) == "rank 1"
    assert "hello from rank 1" in board._output_views[1].value
    summary = board.summary()
    print(summary)
    assert summary.startswith("Finished: 2 ranks")
    assert "rank 0: finished" in summary and "rank 1: finished" in summary
    assert "Summary" in board._summary.value
    assert board._stop.disabled


@pytest.mark.timeout(120)
def test_dashboard_shows_the_exit_code_of_a_failed_rank() -> None:
    stream = io.StringIO()
    board = TextDashboard(stream)
    with pytest.raises(WorkerError, match="exited with code 3"):
        notebook_launcher(d.fail_on_rank_one, num_processes=2, cpu=True, dashboard=board)
    rows = {v.rank: (v.state, v.detail) for v in board.ranks.values()}
    print(stream.getvalue())
    assert rows[1] == ("failed", "exited with code 3")
    assert rows[0][0] == "stopped"
    assert board.outcome == "failed"
    assert "rank 1: failed (exited with code 3)" in stream.getvalue()


@pytest.mark.timeout(120)
def test_stop_button_stops_every_rank_and_raises_launch_stopped() -> None:
    before = h.child_pids()
    board = LaunchDashboard(refresh_s=0.1)

    def press_stop_when_running() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            views = list(board.state.ranks.values())
            if views and all(v.pid and "sleeping" in v.lines for v in views):
                break
            time.sleep(0.05)
        board._stop.click()  # the button's own callback, as a front end would trigger it

    presser = threading.Thread(target=press_stop_when_running)
    presser.start()
    started = time.monotonic()
    with pytest.raises(LaunchStopped):
        notebook_launcher(d.sleep_long, num_processes=2, cpu=True, dashboard=board)
    presser.join()
    assert time.monotonic() - started < 30, "the ranks were not stopped promptly"
    assert board.state.outcome == "stopped" and board.status == "stopped"
    assert [v.state for v in board.state.ranks.values()] == ["stopped", "stopped"]
    assert not h.wait_no_children(before), "a worker outlived the Stop button"
    # the next launch in the same process works
    assert notebook_launcher(d.train_with_progress, num_processes=2, cpu=True) == [0, 1]


def test_text_dashboard_outside_a_notebook_prints_states_and_summary(
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = notebook_launcher(d.train_with_progress, num_processes=2, cpu=True, dashboard=True)
    assert results == [0, 1]
    err = capsys.readouterr().err
    print(err)
    assert "nbaccel: rank 0 running" in err and "nbaccel: rank 1 running" in err
    assert "nbaccel: Finished: 2 ranks" in err


@pytest.mark.timeout(120)
def test_on_wait_is_called_in_the_launching_thread_between_waits_and_can_stop() -> None:
    """The seam a blocked kernel uses for the Stop click: the launcher calls the dashboard's
    ``on_wait`` in its own thread while the workers run; setting stop there stops them."""
    before = h.child_pids()
    launching = threading.current_thread()

    class Polled(TextDashboard):
        def __init__(self) -> None:
            super().__init__(io.StringIO())
            self.calls: list[tuple[float, bool]] = []

        def on_wait(self) -> None:
            self.calls.append((time.monotonic(), threading.current_thread() is launching))
            sleeping = all(v.pid and "sleeping" in v.lines for v in self.ranks.values())
            if sleeping and len(self.calls) >= 3:  # called again and again, then Stop
                self.stop()  # what the Stop button's handler does

    board = Polled()
    with pytest.raises(LaunchStopped):
        notebook_launcher(d.sleep_long, num_processes=2, cpu=True, dashboard=board)
    assert len(board.calls) >= 3 and all(same for _, same in board.calls)
    gaps = [b - a for (a, _), (b, _) in zip(board.calls, board.calls[1:], strict=False)]
    assert max(gaps) < 1.0, f"on_wait was not called every monitor_interval: {max(gaps):.2f}s"
    assert board.outcome == "stopped"
    assert not h.wait_no_children(before), "a worker outlived the stop from on_wait"
