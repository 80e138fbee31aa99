"""Imports inside functions hide dependencies (and cycles) from a reader: each one must say
why it is there (an optional package, a slow import only some paths pay for, ...).

The reason is a comment on the import's own lines, on the comment lines right above it (past
the other imports of its group), or on the ``try:`` that guards it. A linter's directive alone
(``# noqa: F401``, ``# type: ignore``, ``# pragma: no cover``, ...) says nothing to a reader
and is no reason; the reason may stand beside one (``# noqa: F401  # registers the hooks``).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "nbaccel"

# a noqa directive with its codes; text after them is the writer's own
_NOQA = re.compile(r"noqa(?::\s*[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*)?", re.IGNORECASE)
# directives that take the whole of their comment
_DIRECTIVE = re.compile(r"(type:\s*ignore|pragma\b|fmt:|isort:|ruff:|mypy:|pyright:)")
_WORD = re.compile(r"[A-Za-z]{2,}")


def _says_why(comment: str) -> bool:
    """Whether a comment holds a reason: words that are not only a linter's directive."""
    for part in comment.split("#"):
        text = part.strip()
        if _DIRECTIVE.match(text):
            continue
        noqa = _NOQA.match(text)
        if noqa:
            text = text[noqa.end() :]
        if _WORD.search(text):
            return True
    return False


def _comments(source: str) -> dict[int, str]:
    """The comment of each line that has one, by line number."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {tok.start[0]: tok.string for tok in tokens if tok.type == tokenize.COMMENT}


def _unexplained(source: str) -> list[tuple[int, str]]:
    """The function-level imports of a module's source that give no reason."""
    lines = source.splitlines()
    comments = _comments(source)
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not _has_reason(
                node, lines, comments
            ):
                found.append((node.lineno, lines[node.lineno - 1]))
    return found


def _has_reason(node: ast.stmt, lines: list[str], comments: dict[int, str]) -> bool:
    """A reason on the import's own lines, in the comment lines right above it (after other
    imports of the same group), or beside the ``try:`` right above it."""
    last = node.end_lineno or node.lineno
    if any(_says_why(comments.get(line, "")) for line in range(node.lineno, last + 1)):
        return True
    above = node.lineno - 1
    while above >= 1:
        text = lines[above - 1].strip()
        if text.startswith("#"):
            if _says_why(text):
                return True
        elif text.startswith("try:"):
            return _says_why(comments.get(above, ""))
        elif not (text.startswith(("from ", "import ")) or text == ")" or text.endswith(",")):
            return False
        above -= 1
    return False


@pytest.mark.parametrize(
    ("body", "explained"),
    [
        ("import json  # noqa: F401", False),
        ("import json  # type: ignore[import-untyped]", False),
        ("import json  # pragma: no cover", False),
        ("import json  #", False),
        ("import json", False),
        ("x = '# a hash in a string'; import json", False),
        ("import json  # the optional package", True),
        ("import json  # noqa: F401  # registers its codecs", True),
        ("import json  # noqa: F401 registers its codecs", True),
        ("import json  # slow to import  # noqa: F401", True),
        ("# only the fp8 path pays for it\n    import json  # noqa: F401", True),
        ("# noqa: F401\n    import json", False),
        ("try:  # the optional package\n        import json  # noqa: F401\n    except: pass", True),
        ("try:  # noqa: SIM105\n        import json  # noqa: F401\n    except: pass", False),
        ("y = 1  # the optional package\n    import json", False),
        ("# the optional packages\n    import csv\n    import json", True),
        ("from json import (  # noqa: F401\n        dumps,  # the optional package\n    )", True),
    ],
)
def test_a_reason_is_words_not_a_directive(body: str, explained: bool) -> None:
    source = f"def f():\n    {body}\n"
    assert (not _unexplained(source)) is explained


def test_every_function_level_import_says_why() -> None:
    unexplained = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, text in _unexplained(path.read_text(encoding="utf-8"))
    ]
    assert not unexplained, (
        "function-level imports without a comment saying why (optional dependency, slow "
        "import, avoiding an import cycle, ...); a linter directive such as `# noqa: F401` "
        "alone is no reason. Move them to the top of the module or add the reason:\n"
        + "\n".join(unexplained)
    )
