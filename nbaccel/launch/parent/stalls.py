"""What the ranks' answers say is wrong: a collective that diverged, or one that stalled.

Pure functions over the answers of one round of "where are you?" (and the round before):

- **divergence**: ranks of one group in different collectives under the same number (one
  called ``all_gather`` where the others called ``all_reduce``), in one collective with
  tensors of different shapes or dtypes, or waiting for good in collectives of different
  numbers (one rank called a collective the others did not). Named at once: the ranks can
  never meet.
- **stall**: a rank has waited in a collective for ``stall_timeout`` seconds; the ranks of
  its group that are not in it are named with their line.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias

from ..location import CollectiveCall, RankWhere
from ..notes import OPS
from ..states import RankKnown, WorkerPhase
from .wheretable import describe_call, place, source_text

__all__ = ["SAME_SHAPE_OPS", "Finding", "FindingKind", "find_problems", "whereabouts"]

# collectives whose tensors have the same shape and dtype on every rank: all but those that
# send pickles (of any size), all_to_all's (each rank its own splits) and the barriers
SAME_SHAPE_OPS = frozenset(OPS) - {
    "all_gather_object",
    "broadcast_object_list",
    "gather_object",
    "scatter_object_list",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "monitored_barrier",
}
# seconds two ranks wait in collectives of different numbers, seen twice, before that counts
_SETTLED_S = 1.0

FindingKind: TypeAlias = Literal["divergence", "stall"]


@dataclass(frozen=True)
class Finding:
    """One problem: ``kind`` is ``divergence`` or ``stall``; ``key`` names the collective
    (reported once); ``text`` says it in a sentence."""

    kind: FindingKind
    key: tuple[str, int]
    text: str


def _ranks(ranks: list[int], verb: str = "") -> str:
    """``rank 1`` / ``ranks 0, 2``, with ``verb`` agreeing (``waits`` / ``wait``)."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}" + (f" {verb}s" if verb else "")
    return "ranks " + ", ".join(map(str, ranks)) + (f" {verb}" if verb else "")


def whereabouts(rank: int, where: RankWhere | None, state: RankKnown | None = None) -> str:
    """``rank 1 is at In [4], line 8, in f: time.sleep(1e6)`` and the like (``state``: what
    the notebook knows better than the rank's answer)."""
    if state == RankKnown.EXITED:
        return f"rank {rank} has exited"
    if state == RankKnown.ELSEWHERE:
        return f"rank {rank} runs on another machine (its launcher's report names its line)"
    if where is None:
        return f"rank {rank} did not answer"
    if where.collective is not None:
        call = where.collective
        group = f" on {call.group}" if call.group != "world" else ""
        return f"rank {rank} is in {describe_call(call)}{group}"
    if where.phase == WorkerPhase.IDLE:
        after = f" (its last task was {where.task})" if where.task else ""
        return f"rank {rank} is idle{after}"
    if where.phase == WorkerPhase.RETURNED:
        return f"rank {rank} returned from {where.task or 'its function'}"
    if where.frame is not None:
        text = source_text(where.frame)
        return (
            f"rank {rank} is at {place(where.frame)}, in {where.frame.function}"
            + (f": {text}" if text else "")
            + ", in no collective"
        )
    return f"rank {rank} is running {where.task or 'its task'}, in no collective"


def _calls(answers: Mapping[int, RankWhere | None]) -> dict[str, dict[int, CollectiveCall]]:
    """group id -> rank -> the collective that rank is in."""
    groups: dict[str, dict[int, CollectiveCall]] = defaultdict(dict)
    for rank, where in answers.items():
        if where is not None and where.collective is not None:
            groups[where.collective.group_id or where.collective.group][rank] = where.collective
    return groups


def _entered(rank: int, call: CollectiveCall, where: RankWhere | None) -> str:
    """``rank 1 called all_gather (#17, In [4], line 12)``, or how a launched function ended."""
    if call.site is None and where is not None and where.phase == WorkerPhase.RETURNED:
        return f"rank {rank} returned from {where.task or 'its function'}"
    return f"rank {rank} called {describe_call(call)}"


def _same_number(
    group: str, seq: int, calls: dict[int, CollectiveCall], answers: Mapping[int, RankWhere | None]
) -> Finding | None:
    ops = {call.op for call in calls.values()}
    if len(ops) > 1:
        # who waited longest, among the ranks in the person's own collectives
        own = [r for r in calls if calls[r].site is not None] or list(calls)
        first = max(own, key=lambda rank: calls[rank].seconds)
        waiting = [r for r in calls if calls[r].op == calls[first].op]
        others = [r for r in sorted(calls) if r not in waiting]
        entered = ", ".join(_entered(r, calls[r], answers.get(r)) for r in others)
        left = any(calls[r].site is None for r in others)
        hint = (
            "every rank must call the collectives the others call (one inside a branch that "
            "only some ranks take?)"
            if left
            else "the ranks of a group must call the same collectives in the same order"
        )
        text = f"{entered} while {_ranks(waiting, 'wait')} in {describe_call(calls[first])}: {hint}"
        return Finding("divergence", (group, seq), text)
    op = next(iter(ops))
    sent = {r: (call.shapes, call.dtypes) for r, call in calls.items() if call.shapes}
    if op in SAME_SHAPE_OPS and len(set(sent.values())) > 1:
        each = ", ".join(
            f"rank {r} sends {calls[r].tensors} ({place(calls[r].site) or 'library code'})"
            for r in sorted(sent)
        )
        text = f"{op} (#{seq}): {each}; every rank must pass tensors of the same shape and dtype"
        return Finding("divergence", (group, seq), text)
    return None


def _out_of_order(
    group: str,
    calls: dict[int, CollectiveCall],
    previous: Mapping[int, RankWhere | None],
) -> Finding | None:
    """Ranks that have waited in collectives of different numbers, in two rounds running."""
    settled = {}
    for rank, call in calls.items():
        before = previous.get(rank)
        earlier = before.collective if before is not None else None
        if call.seconds >= _SETTLED_S and earlier is not None and earlier.seq == call.seq:
            settled[rank] = call
    if len({call.seq for call in settled.values()}) < 2:
        return None
    each = " and ".join(
        f"{_ranks([r], 'wait')} in {describe_call(settled[r])}" for r in sorted(settled)
    )
    text = (
        f"{each}: the ranks are in different collectives of one group, so one of them called "
        "a collective the others did not"
    )
    return Finding("divergence", (group, min(c.seq for c in settled.values())), text)


def _stalled(
    group: str,
    seq: int,
    calls: dict[int, CollectiveCall],
    answers: Mapping[int, RankWhere | None],
    states: Mapping[int, RankKnown],
    stall_timeout: float,
) -> Finding | None:
    longest = max(calls.values(), key=lambda call: call.seconds)
    if longest.seconds < stall_timeout:
        return None
    members = longest.group_ranks or tuple(sorted(answers))
    missing = [r for r in members if r not in calls and r in answers]
    elsewhere = [r for r in members if r not in answers]  # another machine's launcher's ranks
    head = f"{_waited(list(calls))} {longest.seconds:.0f} s in {describe_call(longest)}"
    if missing:
        named = "; ".join(whereabouts(r, answers.get(r), states.get(r)) for r in missing)
        text = f"{head}, and {_ranks(missing)} never joined it: {named}"
    elif elsewhere:
        text = f"{head}; every rank of this machine is in it"
    else:
        text = (
            f"{head}; every rank of the group is in it, so the backend itself is stuck (a lost "
            "connection, a hung device)"
        )
    if elsewhere:
        text += (
            f"; {_ranks(elsewhere, 'run')} on other machines: the cell that launched them "
            "there says where they are"
        )
    return Finding("stall", (group, seq), text)


def _waited(ranks: list[int]) -> str:
    return f"{_ranks(ranks)} {'has' if len(ranks) == 1 else 'have'} waited"


def find_problems(
    answers: Mapping[int, RankWhere | None],
    previous: Mapping[int, RankWhere | None],
    states: Mapping[int, RankKnown],
    stall_timeout: float | None,
) -> list[Finding]:
    """The problems one round of answers shows (``previous``: the round before; ``states``:
    what the notebook knows better, e.g. ``exited``); divergences first."""
    found: list[Finding] = []
    stalls: list[Finding] = []
    for group, calls in _calls(answers).items():
        by_seq: dict[int, dict[int, CollectiveCall]] = defaultdict(dict)
        for rank, call in calls.items():
            by_seq[call.seq][rank] = call
        for seq, same in sorted(by_seq.items()):
            problem = _same_number(group, seq, same, answers)
            if problem is not None:
                found.append(problem)
            elif stall_timeout is not None:
                stall = _stalled(group, seq, same, answers, states, stall_timeout)
                if stall is not None:
                    stalls.append(stall)
        order = _out_of_order(group, calls, previous) if len(by_seq) > 1 else None
        if order is not None:
            found.append(order)
    return found + stalls
