"""The launcher compares its states as enum members, never as text.

The state enums of ``nbaccel/launch`` (``states.py``: ``Fate``, ``RankState``, ``TaskState``...)
are ``str`` enums, so that a person's ``on_event`` may still test ``event.state == "running"``
and a ``WorkerError``'s fates read ``fate.state == "raised"``. Inside nbaccel that equality is
a trap: ``fate.state == "timed_out"`` is always False and every type checker lets it pass.

This test asks mypy itself: it type-checks ``nbaccel`` with a small plugin that notes each
``==``, ``!=``, ``in`` and ``not in`` whose one side mypy infers as a ``str`` enum of
``nbaccel.launch`` and whose other side as plain text (a string literal, a ``str``, or a
collection of them). Text belongs at the edges only: ``str(state)`` for a display or JSON, and
``State(text)`` to read one back. (The launcher's plain enums and ``Literal`` modes need no
plugin: ``strict_equality`` in ``pyproject.toml`` makes ``python -m mypy`` refuse those.)
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="the check runs mypy (a dev dependency)")

from mypy import build
from mypy.modulefinder import BuildSource
from mypy.options import Options
from mypy.plugin import MethodContext, Plugin
from mypy.types import (
    Instance,
    LiteralType,
    TupleType,
    Type,
    UnionType,
    get_proper_type,
)

ROOT = Path(__file__).resolve().parents[2]
_SCOPE = "nbaccel.launch."  # the str enums whose members must be compared as members


def state_enum(typ: Type) -> str | None:
    """The name of the ``str`` enum of ``nbaccel.launch`` that ``typ`` is (or one member of,
    or a union holding one), else None."""
    typ = get_proper_type(typ)
    if isinstance(typ, UnionType):
        return next((n for n in map(state_enum, typ.items) if n is not None), None)
    if isinstance(typ, LiteralType):
        typ = typ.fallback
    if (
        isinstance(typ, Instance)
        and typ.type.is_enum
        and typ.type.has_base("builtins.str")
        and typ.type.fullname.startswith(_SCOPE)
    ):
        return typ.type.name
    return None


def plain_text(typ: Type) -> bool:
    """``typ`` is text that is no state enum: ``str``, a string literal, or a union with one."""
    typ = get_proper_type(typ)
    if isinstance(typ, UnionType):
        return any(plain_text(item) for item in typ.items)
    if isinstance(typ, LiteralType):
        typ = typ.fallback
    return isinstance(typ, Instance) and typ.type.fullname == "builtins.str"


def contained(container: Type) -> list[Type]:
    """What ``x in container`` compares ``x`` with: a tuple's items, a collection's item type
    (a dict's keys), or the text itself for a substring test."""
    container = get_proper_type(container)
    if isinstance(container, TupleType):
        return list(container.items)
    if isinstance(container, Instance):
        if container.type.fullname == "builtins.str":
            return [container]
        return list(container.args[:1])
    return []


class _Comparisons(Plugin):
    """Notes ``(file, line, what)`` for each comparison of a state enum with text. It notes
    rather than reports: mypy checks ``in`` twice (container, then iterable) and drops the
    errors of the first try."""

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self.found: set[tuple[str, int, str]] = set()

    def get_method_hook(self, fullname: str) -> Callable[[MethodContext], Type] | None:
        method = fullname.rpartition(".")[2]
        if method in ("__eq__", "__ne__"):
            return self._equality
        if method == "__contains__":
            return self._membership
        return None

    def _note(self, ctx: MethodContext, what: str) -> None:
        path = Path(getattr(ctx.api, "path", "")).resolve()
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        self.found.add((shown.as_posix(), ctx.context.line, what))

    def _other(self, ctx: MethodContext) -> Type | None:
        return ctx.arg_types[0][0] if ctx.arg_types and ctx.arg_types[0] else None

    def _equality(self, ctx: MethodContext) -> Type:
        other = self._other(ctx)
        if other is not None:
            for one, two in ((ctx.type, other), (other, ctx.type)):
                name = state_enum(one)
                if name is not None and plain_text(two):
                    self._note(ctx, f"{name} compared with text")
        return ctx.default_return_type

    def _membership(self, ctx: MethodContext) -> Type:
        other = self._other(ctx)
        name = state_enum(other) if other is not None else None
        if name is not None and any(plain_text(item) for item in contained(ctx.type)):
            self._note(ctx, f"{name} looked up among text")
        return ctx.default_return_type


def comparisons_with_text(modules: Iterable[tuple[Path, str]]) -> list[tuple[str, int, str]]:
    """Type-check ``modules`` (``(file, dotted name)``; what they import from outside them
    is skipped, as ``Any``) and return each state enum compared with text, in file order."""
    options = Options()
    options.python_version = (3, 10)
    options.incremental = False  # every module checked afresh: the plugin sees each one
    options.cache_dir = os.devnull
    options.follow_imports = "skip"
    options.ignore_missing_imports = True
    options.check_untyped_defs = True
    plugin = _Comparisons(options)
    sources = [BuildSource(str(path), name) for path, name in modules]
    build.build(sources, options, extra_plugins=[plugin])
    return sorted(plugin.found)


def _package(root: Path, package: str) -> list[tuple[Path, str]]:
    found = []
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found.append((path, ".".join(parts)))
    return found


def test_nbaccel_compares_state_enums_with_their_members_only() -> None:
    found = comparisons_with_text(_package(ROOT, "nbaccel"))
    assert not found, "compare with the enum's members (text only at the edges):\n" + "\n".join(
        f"  {path}:{line}: {what}" for path, line, what in found
    )


_MISTAKES = """
    from nbaccel.launch.states import Fate, RankState, TaskState


    def check(fate: Fate, state: RankState | None, names: list[str], text: str) -> list[bool]:
        return [
            fate == "timed_out",  # caught: a literal, misspelt
            "stopped" != fate,  # caught: the literal on the left
            fate in ("raised", "exited"),  # caught: a tuple of literals
            state not in names,  # caught: a list of str
            Fate.RAISED == "raised",  # caught: a member itself
            fate == text,  # caught: any str
            fate in "raised exited",  # caught: a substring test
            fate == Fate.RAISED,  # fine: members
            fate in (Fate.RAISED, Fate.EXITED),  # fine
            state == RankState.FAILED,  # fine
            str(fate) == "raised",  # fine: text at an edge
            TaskState(text) is TaskState.IDLE,  # fine: text read back
        ]
"""


def test_the_check_catches_each_way_of_comparing_with_text(tmp_path: Path) -> None:
    snippet = tmp_path / "mistakes.py"
    snippet.write_text(textwrap.dedent(_MISTAKES), encoding="utf-8")
    states = [(ROOT / "nbaccel" / "__init__.py", "nbaccel")]
    states += [(ROOT / "nbaccel" / "launch" / "__init__.py", "nbaccel.launch")]
    states += [(ROOT / "nbaccel" / "launch" / "states.py", "nbaccel.launch.states")]
    found = comparisons_with_text([*states, (snippet, "mistakes")])
    caught = {line for _, line, _ in found}
    lines = snippet.read_text(encoding="utf-8").splitlines()
    expected = {n for n, text in enumerate(lines, 1) if "# caught" in text}
    assert caught == expected, found
    assert {what for *_, what in found} == {
        "Fate compared with text",
        "Fate looked up among text",
        "RankState looked up among text",
    }
