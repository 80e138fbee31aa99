"""The watch over a group's ranks: asks each where it is, now and then, and says what is wrong.

The loop that supervises a launch or a pool call calls :meth:`WhereWatch.tick` between its
waits; about once a second (``poll_every``) the watch writes one ``AskWhere`` to each rank's
task pipe, and the ranks' reader threads answer with a ``Location`` (a few hundred bytes),
which the supervisor hands to :meth:`WhereWatch.on_location`. When every rank answered, the
round is checked (``stalls.find_problems``): a divergence or a stall is reported once, as
``on_stall`` says (``warn``: the table in the cell, the run goes on; ``raise``: the owner stops
the ranks and raises :class:`~nbaccel.launch.parent.errors.StallError`).

:meth:`WhereWatch.where` answers from any thread: while a supervising loop runs, it
waits for that loop to read the answers (the loop's thread is the one that may draw in the
cell); otherwise it reads them itself.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

from ..config import OnStall
from ..location import CollectiveCall, RankWhere
from ..protocol import AskWhere, Location, encode_for_worker
from ..states import RankKnown, WorkerPhase
from .errors import StallError
from .stalls import Finding, find_problems
from .wheretable import WhereTable, row_of

__all__ = ["WatchedGroup", "WhereWatch", "running_watches", "stall_error", "where_note"]

_ANSWER_S = 2.0  # a round's answers come within this, or the rank counts as not answering
_RUNNING: list[WhereWatch] = []  # the watches of the launches and pool calls running now


def _headline(finding: Finding) -> str:
    what = "a collective diverged" if finding.kind == "divergence" else "a collective stalled"
    return f"{what}: {finding.text}."


def stall_error(raised: tuple[Finding, WhereTable], after: str) -> StallError:
    """The error of ``on_stall="raise"``: the finding, the table, then ``after`` (what the
    launcher did: stopped the ranks, restarted the pool's group)."""
    finding, table = raised
    return StallError(
        f"{_headline(finding)}\n{table.text(indent='  ')}\n{after}", finding.kind, list(table)
    )


def where_note(table: WhereTable | None, when: str, findings: Sequence[Finding] = ()) -> str:
    """What went wrong (``findings``) and the table, as a note to an error raised while ranks
    were left waiting (empty when there is neither)."""
    said = "\n".join(f"nbaccel: {_headline(finding)}" for finding in findings)
    if table is None:
        return said
    return (said + "\n" if said else "") + f"Where every rank was {when}:\n{table.text('  ')}"


def running_watches() -> list[WhereWatch]:
    """The watches of the launches and pool calls running now, newest last (``%nbaccel
    where`` asks the newest)."""
    return list(_RUNNING)


def _doing(where: RankWhere | None) -> object:
    """What a rank does, to tell whether it still does it: phase, task and line."""
    if where is None:
        return None
    line = where.frame
    return (where.phase, where.task, line.filename if line else "", line.lineno if line else 0)


class WatchedGroup(Protocol):
    """What a watch asks of the group it belongs to (a ``LaunchGroup`` or a ``PoolGroup``)."""

    def send_quietly(self, message: bytes, ranks: Collection[int]) -> None:
        """Write one message to the task pipes of ``ranks`` (a rank gone is not an error)."""

    def live_ranks(self) -> list[int]:
        """The ranks whose process still runs (the others are not asked)."""

    def exited_ranks(self) -> list[int]:
        """The ranks whose process ended (the table says so, whatever they said last)."""

    def pump(self, timeout: float) -> None:
        """Wait up to ``timeout`` s and hand on the messages that came (the supervisor's)."""


class WhereWatch:
    """Where each rank of one group is, and the stalls and divergences that shows.

    Args:
        group: the group it watches: its task pipes, its live and exited ranks, its wait.
        ranks: the group's global ranks.
        stall_timeout: seconds in one collective that count as a stall (None: no rounds;
            :meth:`where` still answers).
        on_stall: ``"warn"`` or ``"raise"``.
        poll_every: seconds between rounds.
    """

    def __init__(
        self,
        group: WatchedGroup,
        ranks: Collection[int],
        *,
        stall_timeout: float | None,
        on_stall: OnStall = "warn",
        poll_every: float = 1.0,
    ) -> None:
        self.group = group
        self.ranks = sorted(ranks)
        self.stall_timeout = stall_timeout
        self.on_stall = on_stall
        self.poll_every = poll_every
        self.raised: tuple[Finding, WhereTable] | None = None  # on_stall="raise": the owner stops
        self.loop_thread: threading.Thread | None = None  # the supervising loop, while it runs
        self._numbers = itertools.count(1)
        self._answers: dict[int, dict[int, RankWhere]] = {}
        self._changed = threading.Condition()
        self._round: tuple[int, float, tuple[int, ...]] | None = None  # number, sent, ranks
        self._next = time.monotonic() + min(poll_every, 1.0)
        self._previous: dict[int, RankWhere | None] = {}
        self._latest: dict[int, RankWhere | None] = {}
        self._since: dict[int, tuple[object, float]] = {}  # rank -> (what it does, since)
        self._reported: set[tuple[str, int]] = set()
        self._asked: dict[int, RankWhere | None] = {}  # the answers of the last where()

    # -- the supervising loop ----------------------------------------------------------------
    def __enter__(self) -> WhereWatch:
        self.loop_thread = threading.current_thread()
        _RUNNING.append(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.loop_thread = None
        if self in _RUNNING:
            _RUNNING.remove(self)
        with self._changed:
            self._changed.notify_all()

    def on_location(self, message: Location) -> None:
        """A rank's answer (called by whichever thread read it); a late answer to a question
        no one waits for any more is dropped."""
        with self._changed:
            if message.request in self._answers:
                self._answers[message.request][message.rank] = message.where
                self._changed.notify_all()

    def tick(self) -> None:
        """Between the loop's waits: start a round when one is due, check one that ended."""
        if self.stall_timeout is None or self.raised is not None:
            return
        now = time.monotonic()
        if self._round is None:
            live = self.group.live_ranks()
            if now >= self._next and live:
                number = self._open()
                self._round = (number, now, tuple(sorted(live)))
                self._send(AskWhere(number), live)
            return
        number, sent, asked = self._round
        answers = self._answers.get(number, {})
        if len(answers) < len(asked) and now - sent < _ANSWER_S:
            return
        self._round = None
        self._next = now + self.poll_every
        with self._changed:
            self._answers.pop(number, None)
        latest: dict[int, RankWhere | None] = {r: answers.get(r) for r in self.ranks}
        self._remember(latest, sent)
        self._check(latest, self.known())

    def _open(self) -> int:
        """The number of a new question, whose answers are kept until it is closed."""
        with self._changed:
            number = next(self._numbers)
            self._answers[number] = {}
            return number

    def _send(self, ask: AskWhere, ranks: Collection[int]) -> None:
        self.group.send_quietly(encode_for_worker(ask), ranks)

    def known(self) -> dict[int, RankKnown]:
        """What the notebook knows better than the ranks: which of them exited."""
        return dict.fromkeys(self.group.exited_ranks(), RankKnown.EXITED)

    def _remember(self, latest: dict[int, RankWhere | None], sent: float) -> None:
        """Keep the round, and since when each rank has been doing what it does now."""
        self._previous, self._latest = self._latest, latest
        for rank, where in latest.items():
            doing = _doing(where)
            if self._since.get(rank, (None, 0.0))[0] != doing:
                self._since[rank] = (doing, sent)

    def _check(self, latest: dict[int, RankWhere | None], states: dict[int, RankKnown]) -> None:
        members = {
            rank
            for where in latest.values()
            if where is not None and where.collective is not None
            for rank in where.collective.group_ranks
        }
        states = {**dict.fromkeys(members - set(self.ranks), RankKnown.ELSEWHERE), **states}
        for finding in find_problems(latest, self._previous, states, self.stall_timeout):
            if finding.key in self._reported:
                continue
            self._reported.add(finding.key)
            for where in latest.values():  # the same episode is not reported twice
                call = where.collective if where is not None else None
                if call is not None and (call.group_id or call.group) == finding.key[0]:
                    self._reported.add((finding.key[0], call.seq))
            table = self.table(latest, states)
            if self.on_stall == "raise":
                self.raised = (finding, table)
                return
            self.warn(finding, table)

    def warn(self, finding: Finding, table: WhereTable) -> None:
        """``on_stall="warn"``: say it in the cell; the run goes on."""
        then = (
            "These ranks cannot meet: interrupt the kernel to stop the run (on_stall='raise' "
            "stops it by itself)."
            if finding.kind == "divergence"
            else "The run goes on (on_stall='raise' stops it instead; stall_timeout=None turns "
            "this watch off)."
        )
        print(
            f"nbaccel: {_headline(finding)}\n{table.text(indent='  ')}\n{then}",
            file=sys.stderr,
            flush=True,
        )

    # -- where(), from any thread ------------------------------------------------------------
    def where(self, timeout: float = 3.0) -> WhereTable:
        """Where every rank is now (each row's answer also has the whole stack); from any
        thread. A rank that does not answer within ``timeout`` s says ``no answer``."""
        number = self._open()
        asked = tuple(sorted(self.group.live_ranks()))
        if asked:
            self._send(AskWhere(number, detail=True), asked)
        deadline = time.monotonic() + timeout
        while asked and time.monotonic() < deadline:
            live = set(self.group.live_ranks())  # a rank that ended meanwhile will not answer
            with self._changed:
                answered = self._answers.get(number, {})
                if all(r in answered or r not in live for r in asked):
                    break
            loop = self.loop_thread
            if loop is not None and loop is not threading.current_thread():
                with self._changed:
                    self._changed.wait(0.05)
            else:
                self.group.pump(0.05)
        with self._changed:
            answers = self._answers.pop(number, {})
        self._asked = {r: answers.get(r) for r in self.ranks}
        return self.table(self._asked, self.known())

    def explain(self, raised_in: Mapping[int, CollectiveCall]) -> list[Finding]:
        """What the last answers show went wrong (after a rank failed): each rank as
        :meth:`where` found it, else as the last round saw it (a rank that died since), or in
        the collective that raised on it (``raised_in``: the failed ranks' errors; else what
        the rank said)."""
        merged = dict(self._latest)
        merged.update({r: w for r, w in self._asked.items() if w is not None})
        for rank, where in list(merged.items()):  # on its way out of a collective that raised
            if where is not None and where.collective is None and where.failed is not None:
                merged[rank] = dataclasses.replace(where, collective=where.failed)
        for rank, call in raised_in.items():
            where = merged.get(rank)
            if where is None:
                where = RankWhere(rank, "", 0, WorkerPhase.RUNNING)
            merged[rank] = dataclasses.replace(where, collective=call)
        return [f for f in find_problems(merged, {}, {}, None) if f.kind == "divergence"]

    def table(
        self, answers: Mapping[int, RankWhere | None], states: Mapping[int, RankKnown]
    ) -> WhereTable:
        """The where table of one round's ``answers``."""
        now = time.monotonic()
        rows = []
        for rank in self.ranks:
            where = answers.get(rank)
            since = self._since.get(rank)
            seconds = None
            if since is not None and where is not None and since[0] == _doing(where):
                seconds = round(now - since[1], 1)
            rows.append(row_of(rank, where, states.get(rank), seconds))
        return WhereTable.of(rows)

    @property
    def last_round(self) -> dict[int, RankWhere | None]:
        """The answers of the last round that ended (empty before the first)."""
        return dict(self._latest)
