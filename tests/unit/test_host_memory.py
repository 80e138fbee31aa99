"""A host's agent measures its ranks' memory and sends the figures in one frame; the notebook
keeps the latest and hands them to the dashboard and a pool's status, for ranks whose pids
mean nothing on this machine."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from nbaccel.launch.agent.usage import UsageClock
from nbaccel.launch.agent.wire import FrameReader, Usage, encode_frame
from nbaccel.launch.events import MemoryEvent
from nbaccel.launch.parent.hostusage import MemoryTicker, latest
from nbaccel.launch.parent.poolstatus import RankBook
from nbaccel.widgets.state import DashboardState

_HOLD = (
    "import time\nheld = bytearray(64 * 1024 * 1024)\nprint('ready', flush=True)\ntime.sleep(60)"
)


@pytest.fixture
def rank_process() -> Iterator[subprocess.Popen[str]]:
    """A stand-in for a rank: a real process that holds 64 MiB."""
    child = subprocess.Popen([sys.executable, "-c", _HOLD], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    yield child
    child.kill()
    child.wait()


def test_the_agent_measures_its_ranks_into_one_frame(
    rank_process: subprocess.Popen[str],
) -> None:
    clock = UsageClock(gpus=0, every=0.2)
    assert clock.due()
    frame = clock.measure({3: rank_process.pid})
    assert not clock.due()  # measured just now
    reader = FrameReader()
    (back,) = reader.feed(encode_frame(frame))
    assert isinstance(back, Usage)
    ((rank, (rss, gpu)),) = back.by_rank().items()
    own = psutil.Process(rank_process.pid).memory_info().rss
    assert rank == 3 and gpu is None
    assert rss > 64 * 1024 * 1024 and abs(rss - own) < own / 4
    time.sleep(0.25)
    assert clock.due()


def test_a_rank_that_ended_is_left_out(rank_process: subprocess.Popen[str]) -> None:
    rank_process.kill()
    rank_process.wait()
    assert UsageClock(gpus=0).measure({0: rank_process.pid}).by_rank() == {}


def test_a_rank_that_ended_but_is_not_reaped_yet_is_left_out(
    rank_process: subprocess.Popen[str],
) -> None:
    """A rank that returned and waits for its agent to reap it (a zombie) reads 0 bytes: no
    figure, not a dashboard's "RSS 0 B" over the last real one."""
    rank_process.kill()
    zombie, deadline = psutil.Process(rank_process.pid), time.monotonic() + 10
    while zombie.status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the killed process did not end within 10 s"
        time.sleep(0.01)
    assert UsageClock(gpus=0).measure({0: rank_process.pid}).by_rank() == {}


class _Agent:
    def __init__(self, memory: dict[int, tuple[int, int | None]]) -> None:
        self.memory = memory


def test_each_new_set_of_figures_becomes_one_event_per_rank() -> None:
    agents = [_Agent({0: (10, None), 1: (11, None)}), _Agent({2: (20, 5)}), _Agent({})]
    seen: list[MemoryEvent] = []
    ticker = MemoryTicker(lambda: agents, seen.append)
    ticker.tick()
    assert [(e.rank, e.rss, e.gpu_memory) for e in seen] == [
        (0, 10, None),
        (1, 11, None),
        (2, 20, 5),
    ]
    ticker.tick()  # nothing new arrived
    assert len(seen) == 3
    agents[1].memory = {2: (21, 6)}  # the next frame of the second agent
    ticker.tick()
    assert [(e.rank, e.rss, e.gpu_memory) for e in seen[3:]] == [(2, 21, 6)]
    assert latest(agents) == {0: (10, None), 1: (11, None), 2: (21, 6)}


def test_the_dashboard_shows_a_remote_ranks_memory() -> None:
    state = DashboardState()
    state.begin(4)
    state.set_hosts({0: "node1", 1: "node1", 2: "node2", 3: "node2"})
    state.handle(MemoryEvent(rank=2, rss=300 * 1024 * 1024, gpu_memory=2 * 1024**3))
    state.sample_memory()  # this machine's sampling leaves ranks without a pid alone
    row = state.ranks[2].row()
    assert (
        row["rank"] == "2 (node2)" and row["RSS"] == "300.0 MiB" and row["GPU memory"] == "2.0 GiB"
    )
    assert state.ranks[3].row()["RSS"] == "-"


def test_a_pool_on_hosts_reports_what_the_agents_measured() -> None:
    book = RankBook(hosts={0: "node1", 1: "node2"}, pids={0: 1, 1: 2})
    book.remote_rss[1] = 123
    rows = book.rows(2, "ready", "")
    assert [(r["host"], r["rss"]) for r in rows] == [("node1", None), ("node2", 123)]
    assert [r["rss"] for r in book.rows(2, "closed", "")] == [None, None]
