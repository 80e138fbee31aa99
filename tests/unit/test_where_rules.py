"""The where table and the rules that read it: which line is the person's, how a place is
named, what counts as a divergence or a stall, and the sentences that say so."""

from __future__ import annotations

import os
import sys

import pytest
import torch

import nbaccel
from nbaccel.launch.location import CollectiveCall, RankWhere, SourceLine
from nbaccel.launch.parent.stalls import find_problems, whereabouts
from nbaccel.launch.parent.wheretable import WhereTable, place, row_of
from nbaccel.launch.states import WorkerPhase
from nbaccel.launch.worker.frames import is_library

CELL = "<nbaccel cell In [4]>"


def _line(lineno: int, text: str = "", filename: str = CELL) -> SourceLine:
    return SourceLine(filename, lineno, "<module>", text)


def _call(
    op: str,
    seq: int,
    lineno: int | None,
    seconds: float = 1.0,
    shapes: tuple[tuple[int, ...], ...] = ((4,),),
    ranks: tuple[int, ...] = (0, 1),
) -> CollectiveCall:
    site = _line(lineno, f"dist.{op}(t)") if lineno is not None else None
    dtypes = ("float32",) * len(shapes)
    return CollectiveCall(op, seq, "world", ranks, site, "", shapes, dtypes, seconds, "0")


def _at(
    rank: int,
    lineno: int = 8,
    text: str = "time.sleep(1e6)",
    call: CollectiveCall | None = None,
    phase: WorkerPhase = WorkerPhase.RUNNING,
) -> RankWhere:
    frame = _line(lineno, text) if call is None else call.site
    return RankWhere(rank, "node1", 100 + rank, phase, "In [4]", frame, call)


# -- which frames are the person's ---------------------------------------------------------------


def test_the_persons_code_is_everything_but_torch_nbaccel_the_stdlib_and_packages() -> None:
    assert is_library(torch.__file__ or "") and is_library(nbaccel.__file__ or "")
    assert is_library(os.__file__) and is_library("<string>")
    assert not is_library(CELL) and not is_library("/tmp/ipykernel_1/2045.py")
    assert not is_library(__file__)  # a test file, like a person's script
    assert is_library(os.path.join(sys.prefix, "lib", "site-packages", "tqdm", "std.py"))


# -- places and rows -------------------------------------------------------------------------


def test_places_name_cells_tasks_and_files() -> None:
    assert place(_line(12)) == "In [4], line 12"
    assert place(_line(3, filename="<nbaccel task 7>")) == "task 7, line 3"
    assert place(_line(33, filename="/home/me/train.py")) == "train.py:33"
    assert place(None) == ""


def test_a_row_says_where_and_in_which_collective() -> None:
    call = _call("all_gather", 17, 12, seconds=4.26, shapes=((4, 3),))
    row = row_of(1, _at(1, call=call))
    assert row["rank"] == 1 and row["state"] == "in collective" and row["host"] == "node1"
    assert row["where"] == "In [4], line 12" and row["source"] == "dist.all_gather(t)"
    assert (row["collective"], row["seq"], row["group"]) == ("all_gather", 17, "world")
    assert row["shapes"] == [[4, 3]] and row["dtypes"] == ["float32"] and row["seconds"] == 4.3
    assert row["call_site"] == "In [4], line 12"
    assert list(row)[:4] == ["rank", "host", "pid", "state"]


def test_rows_without_an_answer_and_finished_ranks() -> None:
    assert row_of(2, None)["state"] == "no answer"
    assert row_of(2, None, "exited")["state"] == "exited"
    leaving = RankWhere(
        1, "n", 1, WorkerPhase.RETURNED, "train", None, _call("all_gather", 3, None)
    )
    row = row_of(1, leaving)
    assert row["state"] == "returned" and row["collective"] is None  # its way out is not shown


def test_the_table_shows_text_and_html() -> None:
    table = WhereTable.of(
        [row_of(1, _at(1)), row_of(0, _at(0, call=_call("all_reduce", 3, 10)), seconds=None)]
    )
    text = table.text()
    assert text.splitlines()[0].split() == [
        "rank",
        "host",
        "state",
        "where",
        "code",
        "collective",
        "for",
    ]
    assert [row["rank"] for row in table] == [0, 1]
    assert "all_reduce #3 float32[4]" in text and "time.sleep(1e6)" in text
    assert "<td>In [4], line 10</td>" in table._repr_html_()
    assert str(table) == text


# -- divergences -----------------------------------------------------------------------------


def test_different_collectives_under_one_number_are_named_at_once() -> None:
    answers = {
        0: _at(0, call=_call("all_reduce", 17, 10, seconds=1.5)),
        1: _at(1, call=_call("all_gather", 17, 12, seconds=0.2)),
    }
    (found,) = find_problems(answers, {}, {}, stall_timeout=300)
    assert found.kind == "divergence"
    assert found.text.startswith(
        "rank 1 called all_gather (#17, In [4], line 12) while rank 0 waits in all_reduce "
        "(#17, In [4], line 10)"
    )


def test_a_rank_that_returned_is_named_as_such() -> None:
    answers = {
        0: _at(0, call=_call("all_reduce", 5, 10, seconds=3)),
        1: RankWhere(1, "n", 1, WorkerPhase.RETURNED, "train", None, _call("all_gather", 5, None)),
    }
    (found,) = find_problems(answers, {}, {}, stall_timeout=300)
    assert found.text.startswith("rank 1 returned from train while rank 0 waits in all_reduce")


def test_tensors_of_different_shapes_are_named_with_both_shapes() -> None:
    answers = {
        0: _at(0, call=_call("all_gather", 2, 12, shapes=((2,),))),
        1: _at(1, call=_call("all_gather", 2, 12, shapes=((3,),))),
    }
    (found,) = find_problems(answers, {}, {}, stall_timeout=None)
    assert found.kind == "divergence"
    assert "rank 0 sends float32[2] (In [4], line 12), rank 1 sends float32[3]" in found.text


def test_shapes_may_differ_where_the_collective_allows_it() -> None:
    answers = {
        0: _at(0, call=_call("all_to_all_single", 2, 12, shapes=((2,),))),
        1: _at(1, call=_call("all_to_all_single", 2, 12, shapes=((3,),))),
    }
    assert find_problems(answers, {}, {}, stall_timeout=None) == []


def test_different_numbers_count_only_when_seen_twice() -> None:
    answers = {
        0: _at(0, call=_call("all_reduce", 5, 10, seconds=2)),
        1: _at(1, call=_call("all_reduce", 6, 14, seconds=2)),
    }
    assert find_problems(answers, {}, {}, stall_timeout=None) == []  # maybe passing by
    (found,) = find_problems(answers, answers, {}, stall_timeout=None)
    assert "rank 0 waits in all_reduce (#5, In [4], line 10)" in found.text
    assert "rank 1 waits in all_reduce (#6, In [4], line 14)" in found.text


# -- stalls ----------------------------------------------------------------------------------


def test_a_stall_names_the_rank_not_in_the_collective_and_its_line() -> None:
    answers = {0: _at(0, call=_call("all_reduce", 3, 10, seconds=2.4)), 1: _at(1)}
    assert find_problems(answers, {}, {}, stall_timeout=5) == []
    (found,) = find_problems(answers, {}, {}, stall_timeout=2)
    assert found.kind == "stall"
    assert found.text == (
        "rank 0 has waited 2 s in all_reduce (#3, In [4], line 10), and rank 1 never joined "
        "it: rank 1 is at In [4], line 8, in <module>: time.sleep(1e6), in no collective"
    )


def test_a_stall_with_every_rank_in_it_blames_the_backend() -> None:
    answers = {r: _at(r, call=_call("barrier", 9, 4, seconds=9, shapes=())) for r in (0, 1)}
    (found,) = find_problems(answers, {}, {}, stall_timeout=5)
    assert "every rank of the group is in it" in found.text


@pytest.mark.parametrize(
    ("where", "state", "words"),
    [
        (None, "", "rank 1 did not answer"),
        (None, "exited", "rank 1 has exited"),
        (None, "elsewhere", "rank 1 runs on another machine"),
        (RankWhere(1, "n", 1, WorkerPhase.IDLE, "In [4]"), "", "rank 1 is idle (its last task"),
        (RankWhere(1, "n", 1, WorkerPhase.RETURNED, "train"), "", "rank 1 returned from train"),
    ],
)
def test_how_a_rank_outside_the_collective_is_described(
    where: RankWhere | None, state: str, words: str
) -> None:
    assert whereabouts(1, where, state).startswith(words)
