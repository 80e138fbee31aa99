"""One vocabulary per rule: a launched rank's fate and what it announces, how a rank that ended
by itself fared, why a pool call stopped waiting, and what a where watch asks of its group."""

from __future__ import annotations

from collections.abc import Collection

import pytest

from nbaccel.launch.events import RankStateEvent
from nbaccel.launch.parent.errors import RankFate, ended_fate
from nbaccel.launch.parent.poolerrors import RanksStuck, StuckReason, stuck_message
from nbaccel.launch.parent.watch import WatchedGroup, WhereWatch
from nbaccel.launch.parent.wheretable import WhereTable
from nbaccel.launch.protocol import AskWhere, decode_for_worker
from nbaccel.launch.remote import RemoteException
from nbaccel.launch.states import Fate, RankKnown, RankState


def test_every_fate_announces_one_rank_state_as_the_events_always_said() -> None:
    announced = {str(fate): str(fate.announced) for fate in Fate}
    assert announced == {
        "running": "running",
        "returned": "returned",
        "raised": "failed",
        "exited": "failed",
        "signalled": "failed",
        "stopped": "stopped",
        "timed out": "stopped",
        "stalled": "stopped",
    }
    assert {fate for fate in Fate if fate.failed} == {Fate.RAISED, Fate.EXITED, Fate.SIGNALLED}
    event = RankStateEvent.of(3, Fate.TIMED_OUT, restart_count=2)
    assert (event.rank, event.state, event.restart_count) == (3, RankState.STOPPED, 2)
    assert RankFate(0, 0, Fate.SIGNALLED).failed and not RankFate(0, 0, Fate.STALLED).failed


@pytest.mark.parametrize(
    ("exit_code", "raised", "fate"),
    [
        (None, False, Fate.EXITED),
        (0, False, Fate.EXITED),
        (3, False, Fate.EXITED),
        (-9, False, Fate.SIGNALLED),
        (1, True, Fate.RAISED),
        (-15, True, Fate.RAISED),
    ],
)
def test_a_rank_that_ended_by_itself_raised_was_signalled_or_exited(
    exit_code: int | None, raised: bool, fate: Fate
) -> None:
    error = RemoteException("ValueError", "bad", "", None, 0.0) if raised else None
    assert ended_fate(exit_code, error) is fate


def test_a_stuck_call_says_why_in_the_words_it_always_used() -> None:
    stuck = RanksStuck([1], {}, StuckReason.PEER_FAILED)
    assert str(stuck) == "rank(s) [1] did not finish (a peer failed)"
    assert str(RanksStuck([0, 1], {}, StuckReason.INTERRUPTED_TWICE)).endswith(
        "(interrupted twice)"
    )
    table = WhereTable()
    text = stuck_message([1], "In [3]", 5.0, StuckReason.INTERRUPTED, table)
    assert "within grace_period=5.0s after the interrupt;" in text
    assert "within timeout=9s;" in stuck_message([1], "f", 9, StuckReason.TIMEOUT, table)


class _Group:
    """A group of ranks 0..2: rank 2 exited; nothing ever answers."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, list[int]]] = []
        self.waited = 0.0

    def send_quietly(self, message: bytes, ranks: Collection[int]) -> None:
        self.sent.append((message, sorted(ranks)))

    def live_ranks(self) -> list[int]:
        return [0, 1]

    def exited_ranks(self) -> list[int]:
        return [2]

    def pump(self, timeout: float) -> None:
        self.waited += timeout


def test_a_watch_asks_its_group_and_marks_the_ranks_that_exited() -> None:
    group = _Group()
    checked: WatchedGroup = group  # the protocol the groups meet
    watch = WhereWatch(checked, [0, 1, 2], stall_timeout=None)
    table = watch.where(timeout=0.1)
    assert [(row["rank"], row["state"]) for row in table] == [
        (0, "no answer"),
        (1, "no answer"),
        (2, "exited"),
    ]
    assert watch.known() == {2: RankKnown.EXITED}
    ((message, ranks),) = group.sent
    asked = decode_for_worker(message)
    assert isinstance(asked, AskWhere) and asked.detail and ranks == [0, 1]
    assert group.waited > 0  # no loop runs: where() waited on the group itself
