"""The where table: one row per rank, as data, shown as text or HTML.

``WorkerPool.where()``, ``%nbaccel where``, a stall's report and the errors of ranks left
waiting all show this table. Each row is a plain dict:

- ``rank``, ``host``, ``pid``;
- ``state``: ``running``, ``in collective``, ``idle`` (a pool rank between tasks),
  ``returned`` / ``failed`` (a launched function ended; the rank waits to leave), ``exited``,
  or ``no answer``;
- ``task``: the cell or function the rank runs (a pool's last one when idle);
- ``where``: the person's innermost line, ``In [4], line 12`` for a notebook cell,
  ``train.py:33`` otherwise; ``file``, ``line``, ``function`` and ``source`` (the line's text);
- ``collective``: the collective it is in (``all_reduce``...), else None; then ``seq`` (its
  number on its group, alike on every rank), ``group`` (``world`` or ``ranks 0,2``),
  ``call_site`` (where it was called), ``via`` (the nbaccel or torch function called, when not
  the collective itself), ``shapes`` and ``dtypes`` of the tensors it sends, ``queued``
  (True: an ``async_op=True`` call returned and its work has not completed);
- ``seconds``: how long it has been in the collective, else on that line as far as the
  notebook has seen (None when it does not know).
"""

from __future__ import annotations

import linecache
import os
from collections.abc import Sequence
from typing import Any

from ...tables import html_table, text_table
from ..location import CollectiveCall, RankWhere, SourceLine
from ..states import RankKnown, WorkerPhase

__all__ = ["WhereTable", "describe_call", "place", "row_of", "source_text"]

_KEYS = (
    "rank", "host", "pid", "state", "task", "where", "file", "line", "function", "source",
    "collective", "seq", "group", "call_site", "via", "shapes", "dtypes", "queued", "seconds",
)  # fmt: skip
_COLUMNS = ("rank", "host", "state", "where", "code", "collective", "for")
_POOL_CELL, _POOL_TASK = "<nbaccel cell ", "<nbaccel task "


def place(line: SourceLine | None) -> str:
    """``In [4], line 12`` for a notebook cell or a pool's cell, ``train.py:33`` otherwise."""
    if line is None:
        return ""
    name = line.filename
    if name.startswith(_POOL_CELL) and name.endswith(">"):
        return f"{name[len(_POOL_CELL) : -1]}, line {line.lineno}"
    if name.startswith(_POOL_TASK) and name.endswith(">"):
        return f"task {name[len(_POOL_TASK) : -1]}, line {line.lineno}"
    cell = _notebook_cell(name)
    if cell is not None:
        return f"{cell}, line {line.lineno}"
    return f"{os.path.basename(name) or name}:{line.lineno}"


def _notebook_cell(filename: str) -> str | None:
    """``In [4]`` when ``filename`` is a cell of this kernel (IPython names its cells' code)."""
    try:
        # IPython is there only in a notebook (the notebook extra)
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    namer = getattr(getattr(shell, "compile", None), "format_code_name", None)
    if namer is None:
        return None
    try:
        named = namer(filename)
    except Exception:
        return None
    if not named:
        return None
    text = str(named[1])
    return "In [" + text[3:] if text.startswith("In[") else text


def source_text(line: SourceLine | None) -> str:
    """The line's text: the worker's, else this process's copy (a spawned worker cannot read
    a notebook cell; the kernel can)."""
    if line is None:
        return ""
    return line.text or linecache.getline(line.filename, line.lineno).strip()


def describe_call(call: CollectiveCall) -> str:
    """``all_reduce (#17, In [4], line 10)``."""
    site = place(call.site)
    return f"{call.op} (#{call.seq}{', ' + site if site else ''})"


def row_of(
    rank: int,
    where: RankWhere | None,
    state: RankKnown | None = None,
    seconds: float | None = None,
) -> dict[str, Any]:
    """One rank's row (``state`` given: what the notebook knows better, e.g. ``exited``)."""
    row: dict[str, Any] = dict.fromkeys(_KEYS)
    row.update(rank=rank, state=str(state) if state else "no answer", seconds=seconds)
    if where is None:
        return row
    leaving = where.phase in (WorkerPhase.RETURNED, WorkerPhase.FAILED)
    call = None if leaving else where.collective  # a finished rank's own way out is not shown
    row.update(host=where.host, pid=where.pid, task=where.task or None)
    if not state:
        row["state"] = "in collective" if call is not None else str(where.phase)
    if where.frame is not None:
        frame = where.frame
        row.update(
            where=place(frame),
            file=frame.filename,
            line=frame.lineno,
            function=frame.function,
            source=source_text(frame),
        )
    if call is not None:
        row.update(
            collective=call.op,
            seq=call.seq,
            group=call.group,
            call_site=place(call.site) or None,
            via=call.via or None,
            shapes=[list(shape) for shape in call.shapes],
            dtypes=list(call.dtypes),
            seconds=round(call.seconds, 1),
            queued=call.queued,
        )
    return row


def _collective_text(row: dict[str, Any]) -> str:
    if not row.get("collective"):
        return ""
    text = f"{row['collective']} #{row['seq']}"
    tensors = ", ".join(
        f"{dtype}[{', '.join(map(str, shape))}]"
        for dtype, shape in zip(row.get("dtypes") or [], row.get("shapes") or [], strict=False)
    )
    if tensors:
        text += f" {tensors}"
    if row.get("group") not in (None, "world"):
        text += f" on {row['group']}"
    if row.get("via"):
        text += f" (via {row['via']})"
    if row.get("queued"):
        text += " (queued)"
    return text


def _short(text: Any, width: int = 48) -> str:
    shown = "" if text is None else str(text)
    return shown if len(shown) <= width else shown[: width - 3] + "..."


class WhereTable(list[dict[str, Any]]):
    """Where every rank is: a list of row dicts (see the module), shown as a table."""

    def cells(self) -> list[list[str]]:
        """The rows as text, with the header first."""
        table = [list(_COLUMNS)]
        for row in self:
            seconds = row.get("seconds")
            where = row.get("where") or ""
            if not where and row.get("task") and row.get("state") in ("idle", "returned"):
                where = f"(after {row['task']})"
            table.append(
                [
                    str(row["rank"]),
                    str(row.get("host") or ""),
                    str(row.get("state") or ""),
                    where,
                    _short(row.get("source")),
                    _collective_text(row),
                    f"{seconds:.0f} s" if isinstance(seconds, (int, float)) else "",
                ]
            )
        return table

    def text(self, indent: str = "") -> str:
        """The table as aligned plain text."""
        return text_table(self.cells(), indent)

    def __str__(self) -> str:
        return self.text()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text())

    def _repr_html_(self) -> str:
        return html_table(self.cells())

    @classmethod
    def of(cls, rows: Sequence[dict[str, Any]]) -> WhereTable:
        """A table of ``rows`` in rank order."""
        return cls(sorted(rows, key=lambda row: int(row["rank"])))
