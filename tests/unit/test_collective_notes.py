"""The note page a worker writes before each collective and its launcher reads after a death
(``launch/notes.py``): one layout for both sides, over a real shared memfd page."""

from __future__ import annotations

import os

from nbaccel.launch.notes import (
    MAX_RANKS,
    NOTE_SIZE,
    OPS,
    NotePage,
    call_from_json,
    call_to_json,
    read_note,
)
from nbaccel.launch.worker.collectives import COLLECTIVES


def test_every_tracked_collective_can_be_noted() -> None:
    assert set(COLLECTIVES) <= set(OPS)


def test_a_page_written_by_one_process_is_read_by_its_launcher() -> None:
    launcher = NotePage.create()
    try:
        child = os.fork()
        if child == 0:  # the worker: its own map of the inherited descriptor
            page = NotePage.open(os.dup(launcher.fd))
            page.entered(OPS.index("all_gather"), 3, False, (0, 2), [((3, 5), 0), ((7,), 2)])
            os._exit(0)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        call = launcher.read()
        assert call is not None
        assert (call.op, call.seq, call.group, call.group_ranks) == (
            "all_gather",
            3,
            "ranks 0,2",
            (0, 2),
        )
        assert call.shapes == ((3, 5), (7,)) and call.dtypes == ("float32", "bfloat16")
        assert not call.queued and call.site is None
    finally:
        launcher.close()


def test_left_clears_the_page_and_queued_stays_named() -> None:
    page = NotePage.create()
    try:
        assert page.read() is None  # a new page names nothing
        page.entered(OPS.index("all_reduce"), 1, True, (0, 1), [((4,), 0)])
        page.left(queued=True)
        call = page.read()
        assert call is not None and call.queued and call.group == "world"
        page.left(queued=False)
        assert page.read() is None
    finally:
        page.close()


def test_a_big_group_and_an_unknown_dtype_are_noted_by_what_fits() -> None:
    page = NotePage.create()
    try:
        ranks = tuple(range(MAX_RANKS + 1))
        page.entered(OPS.index("barrier"), 9, False, ranks, [((1,) * 9, 255)])
        call = page.read()
        assert call is not None and call.group == f"a group of {MAX_RANKS + 1} ranks"
        assert call.shapes == ((1,) * 6,) and call.dtypes == ("?",)
    finally:
        page.close()


def test_a_noted_call_travels_as_json() -> None:
    page = bytearray(NOTE_SIZE)
    assert read_note(page) is None
    real = NotePage.create()
    try:
        real.entered(OPS.index("broadcast"), 2, True, (0, 1, 2), [((2, 2), 4)])
        call = real.read()
    finally:
        real.close()
    back = call_from_json(call_to_json(call))
    assert back is not None and call is not None
    assert (back.op, back.seq, back.shapes, back.dtypes) == ("broadcast", 2, ((2, 2),), ("int64",))
    assert call_from_json(None) is None and call_to_json(None) is None


def test_an_op_the_page_does_not_know_is_not_named() -> None:
    page = NotePage.create()
    try:
        page.entered(255, 1, True, (0,), [])
        assert page.read() is None
    finally:
        page.close()
