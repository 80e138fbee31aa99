"""The dashboard as plain text, for a terminal or a notebook without ipywidgets."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from .state import DashboardState

__all__ = ["TextDashboard"]


class TextDashboard(DashboardState):
    """Prints each rank's state changes as they happen and a summary when the launch ends.

    Args:
        stream: where to print (default ``sys.stderr`` at print time, so the ranks' own
            output on stdout stays clean).
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__()
        self._stream = stream
        self._shown: dict[int, str] = {}

    def _print(self, text: str) -> None:
        stream = self._stream if self._stream is not None else sys.stderr
        print(text, file=stream, flush=True)

    def begin(self, num_processes: int, first_rank: int = 0) -> None:
        """A launch starts; remember nothing of an earlier one."""
        super().begin(num_processes, first_rank)
        self._shown = {}

    def changed(self) -> None:
        """Print a line for every rank whose state changed."""
        with self.lock:
            news = [
                (v.rank, v.state, v.detail)
                for v in self.ranks.values()
                if self._shown.get(v.rank) != v.state
            ]
            for rank, state, _ in news:
                self._shown[rank] = state
        if self.outcome == "running":
            for rank, state, detail in news:
                self._print(f"nbaccel: rank {rank} {state}" + (f" ({detail})" if detail else ""))

    def end(self, error: BaseException | None) -> None:
        """Print the summary."""
        super().end(error)
        self._print("nbaccel: " + self.summary())

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.summary())
