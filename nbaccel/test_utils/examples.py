"""Checking that a "complete" example script holds every feature of the per-feature scripts."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["clean_lines", "compare_against_test", "get_function_contents_by_name"]

_LOADERS_LINE = "train_dataloader, eval_dataloader = get_dataloaders(accelerator, batch_size)\n"
_MOCKED = "TESTING_MOCKED_DATALOADERS"
_TEMPLATE = os.path.join("examples", "nlp_example.py")


def get_function_contents_by_name(lines: list[str], name: str) -> list[str]:
    """The lines of top-level function ``name`` ("training_function" or "main") in ``lines``,
    from its ``def`` to the next top-level ``def`` or ``if __name__`` line."""
    if name not in ("training_function", "main"):
        raise ValueError(f"name must be 'training_function' or 'main', got {name!r}.")
    body: list[str] = []
    for line in lines:
        if body and (line.startswith("def ") or line.startswith("if __name__")):
            break
        if body or line.startswith(f"def {name}("):
            body.append(line)
    if not body:
        raise ValueError(f"no top-level function {name!r} found.")
    return body


def clean_lines(lines: list[str]) -> list[str]:
    """``lines`` without comment lines and empty lines."""
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _function(path: str | os.PathLike[str], name: str) -> list[str]:
    lines = Path(path).read_text().splitlines(keepends=True)
    return clean_lines(get_function_contents_by_name(lines, name))


def _without_mocked_blocks(lines: list[str]) -> list[str]:
    """Drop the lines that only tests run: an ``if`` on TESTING_MOCKED_DATALOADERS and the
    lines indented under it, and the line that builds the data loaders."""
    kept: list[str] = []
    block_indent: int | None = None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if block_indent is not None and indent > block_indent:
            continue
        block_indent = None
        if _MOCKED in line:
            block_indent = indent
            continue
        if line.lstrip() != _LOADERS_LINE:
            kept.append(line)
    return kept


def compare_against_test(
    base_filename: str | os.PathLike[str],
    feature_filename: str | os.PathLike[str],
    parser_only: bool,
    secondary_filename: str | os.PathLike[str] | None = None,
    *,
    template_filename: str | os.PathLike[str] = _TEMPLATE,
) -> list[str]:
    """The lines a feature script adds to the template that the complete script lacks.

    Args:
        base_filename: the complete example (e.g. ``examples/complete_nlp_example.py``).
        feature_filename: a per-feature script whose additions the complete one must hold.
        parser_only: compare the ``main`` functions (argument parsing) instead of the
            ``training_function`` functions.
        secondary_filename: the template of the complete example when it is not
            ``template_filename`` (e.g. ``examples/cv_example.py``): lines of the template
            that this one lacks are not asked for.
        template_filename: the script both were written from (relative to the working
            directory by default, as the examples' tests run from the repository root).

    Returns:
        The missing lines; empty when the complete example has every addition.
    """
    name = "main" if parser_only else "training_function"
    template = _function(template_filename, name)
    added = [
        line
        for line in _without_mocked_blocks(_function(feature_filename, name))
        if line not in template
    ]
    present = {line for line in _function(base_filename, name) if line not in template}
    missing = [line for line in added if line not in present]
    if secondary_filename is not None:
        secondary = set(_function(secondary_filename, name))
        template_only = set(Path(template_filename).read_text().splitlines(keepends=True))
        missing = [line for line in missing if line not in template_only - secondary]
    return missing
