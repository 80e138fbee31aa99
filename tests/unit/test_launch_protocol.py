"""The launcher's typed pieces: the worker<->parent messages, the state enums, the dashboard
contract. (Real launches exercise them end to end in the multiprocess and pool tiers.)"""

from __future__ import annotations

import json
import multiprocessing
import pickle
import threading
from typing import Any

import pytest

from nbaccel.launch.events import PoolStateEvent, RankStateEvent
from nbaccel.launch.location import CollectiveCall, RankWhere, SourceLine
from nbaccel.launch.parent.dashboards import Board, open_dashboard
from nbaccel.launch.protocol import (
    AskWhere,
    Crash,
    Location,
    Notice,
    Ready,
    Reply,
    Stop,
    Task,
    TaskReply,
    decode,
    decode_for_worker,
    encode,
    encode_for_worker,
)
from nbaccel.launch.remote import capture_exception
from nbaccel.launch.states import Fate, PoolState, RankState, WorkerPhase


def _error() -> Any:
    try:
        raise ValueError("on rank 1")
    except ValueError as exc:
        return capture_exception(exc, 1.0)


@pytest.mark.parametrize(
    "message",
    [
        Ready(0, "cpu", 123),
        Notice(1, RankStateEvent(rank=1, state=RankState.RUNNING)),
        Reply(0, TaskReply(0, pickle.dumps([1, 2]))),
        Reply(1, TaskReply(3, error=_error())),
        Crash(1, _error()),
        Location(
            0,
            RankWhere(
                0,
                "node1",
                123,
                WorkerPhase.RUNNING,
                "In [3]",
                SourceLine("<nbaccel cell In [3]>", 3, "<module>", "x()"),
                CollectiveCall("all_reduce", 7, "world", (0, 1), None, "", ((4,),), ("float32",)),
            ),
            request=5,
        ),
    ],
)
def test_worker_messages_travel_whole(message: Any) -> None:
    back = decode(encode(message))
    assert type(back) is type(message) and back.rank == message.rank
    assert back == message


@pytest.mark.parametrize(
    "message", [Task(4, "In [2]", b"payload"), AskWhere(), AskWhere(3, detail=True), Stop()]
)
def test_parent_messages_travel_whole(message: Any) -> None:
    assert decode_for_worker(encode_for_worker(message)) == message


def test_anything_else_on_a_pipe_is_a_protocol_error() -> None:
    with pytest.raises(TypeError, match="not a worker message"):
        decode(pickle.dumps(("result", 0, b"")))  # the untyped tuples of old
    with pytest.raises(TypeError, match="not a parent message"):
        decode_for_worker(pickle.dumps((0, "where?", b"")))


def test_states_read_as_their_plain_strings() -> None:
    assert RankState.RUNNING == "running" and f"{Fate.TIMED_OUT}" == "timed out"
    assert repr(PoolState.CLOSED) == "'closed'" and str(PoolState.BROKEN) == "broken"
    event = PoolStateEvent(rank=-1, state=PoolState.READY)
    assert json.loads(json.dumps({"state": event.state})) == {"state": "ready"}
    assert pickle.loads(pickle.dumps(Fate.RAISED)) is Fate.RAISED


class _Minimal:
    """A dashboard with only the four required members (``line_sink`` switched off)."""

    line_sink = None

    def begin(self, num_processes: int, first_rank: int = 0) -> None:
        pass

    def chain(self, on_event: Any) -> Any:
        return on_event

    def end(self, error: BaseException | None) -> None:
        pass


def test_a_dashboard_needs_only_its_four_members() -> None:
    board = open_dashboard(_Minimal())
    assert isinstance(board, Board)
    assert board.line_sink is None and board.stop_requested is None
    assert board.set_pids is None and board.on_wait is None
    with pytest.raises(TypeError, match="begin, chain, line_sink and end"):
        open_dashboard(object())
    assert open_dashboard(None) is None and open_dashboard(False) is None


@pytest.mark.parametrize("flag", [threading.Event(), multiprocessing.get_context("fork").Event()])
def test_any_event_like_stop_flag_is_used_and_hooks_set_later_are_found(flag: Any) -> None:
    dashboard = _Minimal()
    board = open_dashboard(dashboard)
    assert board is not None and board.stop_requested is None
    dashboard.stop_requested = flag  # type: ignore[attr-defined]  # set after opening
    seen: list[dict[int, int]] = []
    dashboard.set_pids = seen.append  # type: ignore[attr-defined]
    assert board.stop_requested is flag
    assert board.set_pids is not None
    board.set_pids({0: 10})
    assert seen == [{0: 10}]
