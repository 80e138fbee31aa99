"""Imports inside functions hide dependencies (and cycles) from a reader: each one must say
why it is there (an optional package, a slow import only some paths pay for, ...)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "nbaccel"


def _function_level_imports(path: Path) -> list[tuple[int, str]]:
    lines = path.read_text().splitlines()
    found = []
    for function in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append((node.lineno, lines[node.lineno - 1]))
    return found


def _has_reason(path: Path, line: int) -> bool:
    """A comment on the import's line, or on the lines right above it (after other imports
    of the same group)."""
    lines = path.read_text().splitlines()
    if "#" in lines[line - 1]:
        return True
    above = line - 2
    while above >= 0:
        text = lines[above].strip()
        if text.startswith("#"):
            return True
        if not (text.startswith(("from ", "import ")) or text == ")" or text.endswith(",")):
            return False
        above -= 1
    return False


def test_every_function_level_import_says_why() -> None:
    unexplained = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, text in _function_level_imports(path)
        if not _has_reason(path, line)
    ]
    assert not unexplained, (
        "function-level imports without a comment saying why (optional dependency, slow "
        "import, ...); move them to the top of the module or add the reason:\n"
        + "\n".join(unexplained)
    )
