"""How the magics show a pool's answers: a cell's value per rank and the status table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..tables import html_table, text_table

__all__ = ["RankValues", "StatusTable", "cell_value"]

_COLUMNS = ("rank", "pid", "state", "cell", "rss", "device")


class RankValues(list[Any]):
    """The values of a cell's last expression on each rank that ran it (``_[i]`` is one).

    Shown as one ``[rankN]:`` line (or block) per rank, the way IPython shows ``Out``.
    """

    def __init__(self, ranks: Sequence[int], values: Sequence[Any]) -> None:
        super().__init__(values)
        self.ranks = list(ranks)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        # IPython is there only in a notebook (the notebook extra)
        from IPython.lib.pretty import pretty

        for index, (rank, value) in enumerate(zip(self.ranks, self, strict=True)):
            if index:
                printer.break_()
            text = pretty(value)
            head = f"[rank{rank}]: "
            printer.text(head + text.replace("\n", "\n" + " " * len(head)))


def _same(values: Sequence[Any]) -> bool:
    """True when every value shows the same (compared by repr: tensors have no plain ==)."""
    try:
        first = repr(values[0])
        return all(repr(value) == first for value in values[1:])
    except Exception:
        return False


def cell_value(ranks: Sequence[int], values: Sequence[Any]) -> Any:
    """What a ``%%nbaccel`` cell returns to IPython for its ``Out``.

    None when no rank's last line was an expression with a value; the value itself when every
    rank has the same; else a :class:`RankValues`.
    """
    if not values or all(value is None for value in values):
        return None
    if _same(values):
        return values[0]
    return RankValues(ranks, values)


def _cell_text(value: Any) -> str:
    lines = str(value).strip().splitlines() if value is not None else []
    text = lines[0] if lines else ""
    return text if len(text) <= 40 else text[:37] + "..."


def _rss_text(value: Any) -> str:
    if isinstance(value, (int, float)) and value > 0:
        return f"{value / 2**20:.0f} MiB"
    return "" if value is None else str(value)


class StatusTable:
    """``pool.status()`` as a table: plain text everywhere, HTML in a notebook."""

    def __init__(self, rows: Sequence[dict[str, Any]]) -> None:
        self.rows = [dict(row) for row in rows]

    def cells(self) -> list[list[str]]:
        """The table's rows as text, with the header first (a ``host`` column for a pool on
        other machines)."""
        hosts = any("host" in row for row in self.rows)
        header = ["rank", "host"] if hosts else ["rank"]
        table = [[*header, "pid", "state", "current cell", "memory", "device"]]
        for row in self.rows:
            cell = row.get("cell", row.get("current_cell"))
            rss = row.get("rss", row.get("rss_bytes"))
            first = [str(row.get("rank", ""))]
            if hosts:
                first.append(str(row.get("host") or ""))
            table.append(
                [
                    *first,
                    str(row.get("pid", "")),
                    str(row.get("state", "")),
                    _cell_text(cell),
                    _rss_text(rss),
                    str(row.get("device", "")),
                ]
            )
        return table

    def __repr__(self) -> str:
        return text_table(self.cells())

    def _repr_html_(self) -> str:
        return html_table(self.cells())
