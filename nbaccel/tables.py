"""Plain tables for the notebook and the terminal: rows of text (header first) as aligned text
and as HTML. The pool's status and the where table are drawn with these."""

from __future__ import annotations

import html
from collections.abc import Sequence

__all__ = ["html_table", "text_table"]


def text_table(cells: Sequence[Sequence[str]], indent: str = "") -> str:
    """``cells`` (the header row first) as left-aligned columns two spaces apart."""
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return "\n".join(
        indent + "  ".join(t.ljust(w) for t, w in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


def html_table(cells: Sequence[Sequence[str]]) -> str:
    """``cells`` (the header row first) as an HTML table, every cell escaped."""
    head = "".join(f"<th>{html.escape(text)}</th>" for text in cells[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(text)}</td>" for text in row) + "</tr>"
        for row in cells[1:]
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
