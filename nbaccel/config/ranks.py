"""``display_ranks``: which ranks' rich output (display(), notebook bars) reaches the cell."""

from __future__ import annotations

from typing import Any

from ..validation import is_int
from .values import ValueProblem

__all__ = ["DEFAULT_DISPLAY_RANKS", "display_ranks_text", "parse_display_ranks"]

DEFAULT_DISPLAY_RANKS = "0"
_HELP = "give a rank, a list of ranks such as [0, 1] or '0,1', or 'all'"


def parse_display_ranks(value: Any) -> tuple[int, ...] | None:
    """``display_ranks`` as a sorted tuple of global ranks, or None for every rank.

    Accepts an int, a list or tuple of ints, a string such as ``"0,1"``, or ``"all"``.

    Raises:
        ValueProblem: the value is none of those (``str(problem)`` says what is allowed).
    """
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "all":
            return None
        parts = [part.strip() for part in text.strip("[]()").split(",") if part.strip()]
        if not parts or not all(part.isdigit() for part in parts):
            raise ValueProblem(f"has the value {value!r}; {_HELP}")
        value = [int(part) for part in parts]
    if is_int(value):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueProblem(f"has the value {value!r}; {_HELP}")
    ranks = []
    for rank in value:
        if not is_int(rank) or rank < 0:
            raise ValueProblem(f"has the value {value!r}; ranks are ints >= 0 ({_HELP})")
        ranks.append(rank)
    return tuple(sorted(set(ranks)))


def display_ranks_text(value: Any) -> str:
    """The normal text form of a ``display_ranks`` value: ``"0"``, ``"0,1"`` or ``"all"``."""
    ranks = parse_display_ranks(value)
    return "all" if ranks is None else ",".join(str(rank) for rank in ranks)
