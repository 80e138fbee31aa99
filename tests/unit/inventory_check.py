"""Compare one entry of Accelerate's inventory (tests/fixtures/accelerate_inventory.json) with
nbaccel: presence, parameters, enum members, constants' values."""

from __future__ import annotations

import enum
import inspect
import json
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).parents[1] / "fixtures" / "accelerate_inventory.json"
POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")


def load_inventory() -> dict[str, Any]:
    """The fixture, as written by tests/fixtures/make_accelerate_inventory.py."""
    return json.loads(FIXTURE.read_text())


def _ours(obj: Any) -> list[inspect.Parameter] | None:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    return [p for p in signature.parameters.values() if p.name not in ("self", "cls")]


def _default_problem(name: str, theirs: str | None, mine: inspect.Parameter) -> str | None:
    if theirs is None:
        return None  # required there; a default here only accepts more calls
    if mine.default is inspect.Parameter.empty:
        return f"{name}: Accelerate's default is {theirs}, nbaccel requires it"
    if theirs == "<object>" or repr(mine.default) == theirs:
        return None
    return f"{name}: default {mine.default!r}, Accelerate's is {theirs}"


def parameter_problems(expected: list[list[Any]], obj: Any) -> list[str]:
    """Why ``obj``'s parameters do not accept every call Accelerate's accepts (empty: they do).

    Accelerate's positional parameters must come first, in order, with the same names;
    keyword-only ones must exist by name; defaults must be equal; parameters nbaccel adds
    must be keyword-only (or ``*args``/``**kwargs``).
    """
    mine = _ours(obj)
    if mine is None:
        return ["no signature"]
    by_name = {p.name: p for p in mine}
    problems = []
    positional = [e for e in expected if e[1] in POSITIONAL]
    mine_positional = [p.name for p in mine if p.kind.name in POSITIONAL]
    if mine_positional[: len(positional)] != [e[0] for e in positional]:
        problems.append(f"positional order {mine_positional} != {[e[0] for e in positional]}")
    for name, kind, default in expected:
        own = by_name.get(name)
        if kind in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            if not any(p.kind.name == kind for p in mine):
                problems.append(f"no {kind} ({name})")
            continue
        if own is None:
            problems.append(f"missing parameter {name}")
            continue
        if kind == "KEYWORD_ONLY" and own.kind.name not in (
            "KEYWORD_ONLY",
            "POSITIONAL_OR_KEYWORD",
        ):
            problems.append(f"{name} must be accepted by keyword")
        problem = _default_problem(name, default, own)
        if problem:
            problems.append(problem)
    theirs = {e[0] for e in expected}
    for p in mine:
        if p.name not in theirs and p.kind.name in POSITIONAL:
            problems.append(f"added parameter {p.name} is not keyword-only")
    return problems


def entry_problems(entry: dict[str, Any], obj: Any) -> list[str]:
    """Why nbaccel's ``obj`` does not match the inventory ``entry`` (empty: it does)."""
    kind = entry["kind"]
    if kind == "enum":
        if not (isinstance(obj, type) and issubclass(obj, enum.Enum)):
            return ["not an enum"]
        members = {m.name: m.value for m in obj}
        return [
            f"member {name}={value!r} missing or different"
            for name, value in entry["members"].items()
            if name not in members or (value is not None and members[name] != value)
        ]
    if kind == "warning":
        ok = isinstance(obj, type) and issubclass(obj, Warning)
        return [] if ok else ["not a Warning subclass"]
    if kind == "constant":
        value = entry["value"]
        same = value is None or obj == value or (isinstance(obj, tuple) and list(obj) == value)
        return [] if same else [f"value {obj!r} != {value!r}"]
    if kind in ("class", "function", "method") and entry.get("params") is not None:
        if not callable(obj):
            return ["not callable"]
        return parameter_problems(entry["params"], obj)
    return []
