"""One progress bar for a distributed run: tqdm on the main process, fed to the dashboard."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

import tqdm.auto
import tqdm.std

from ..launch.events import report_progress
from ..launch.worker.bars import text_bars_in_worker
from ..state import PartialState
from ..state.registry import STATE

__all__ = ["AutoProgressBar", "TextProgressBar", "progress", "text_bars_in_worker"]

_REPORT_EVERY_S = 0.2


class _Reporting:
    """Mixed into a tqdm class: reports the count through the launcher's event channel."""

    disable: bool
    n: int
    total: Any
    desc: str

    def _setup_reporting(self, report: bool) -> None:
        self._report = report and not self.disable
        self._seen = 0  # items yielded by __iter__ (tqdm updates self.n there only now and then)
        self._iterating = False
        self._last_report = 0.0

    def _maybe_report(self, count: int, final: bool = False) -> None:
        if not getattr(self, "_report", False):
            return
        now = time.monotonic()
        if final or now - self._last_report >= _REPORT_EVERY_S:
            self._last_report = now
            total = int(self.total) if self.total is not None else None
            report_progress(count, total, self.desc or "")

    def update(self, n: float | None = 1) -> bool | None:
        out = super().update(n)  # type: ignore[misc]
        if not getattr(self, "_iterating", False):  # tqdm's own __iter__ calls update too
            self._maybe_report(int(self.n))
        return out

    def __iter__(self) -> Iterator[Any]:
        self._iterating = True
        try:
            for item in super().__iter__():  # type: ignore[misc]
                yield item
                self._seen += 1
                self._maybe_report(self._seen)
        finally:
            self._iterating = False

    def close(self) -> None:
        if getattr(self, "_report", False) and not getattr(self, "_closed_report", False):
            self._closed_report = True
            self._maybe_report(max(int(self.n), self._seen), final=True)
        super().close()  # type: ignore[misc]


class TextProgressBar(_Reporting, tqdm.std.tqdm):
    """A text tqdm bar (in launched workers: their output is relayed as text)."""

    def __init__(self, *args: Any, report: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._setup_reporting(report)


class AutoProgressBar(_Reporting, tqdm.auto.tqdm):
    """``tqdm.auto``'s bar (a widget in a notebook's own process)."""

    def __init__(self, *args: Any, report: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._setup_reporting(report)


def progress(
    iterable: Iterable[Any] | None = None,
    accelerator: Any = None,
    *,
    report: bool = True,
    **tqdm_kwargs: Any,
) -> Any:
    """A tqdm bar shown once per machine (on its first process) that also reports its
    progress to the launcher, so the notebook's dashboard shows one bar for the run.

    Args:
        iterable: what to iterate over (or None and call ``.update()`` yourself).
        accelerator: an ``Accelerator`` or ``PartialState``; default ``PartialState()``.
        report: send progress events to the launcher (only from the process that shows it).
        **tqdm_kwargs: for tqdm (``total``, ``desc``, ...); ``disable`` defaults to
            ``not accelerator.is_local_main_process``.

    In launched workers the bar is tqdm's text bar (the launcher relays it to the cell);
    elsewhere it is ``tqdm.auto`` (a widget in a notebook).
    """
    if accelerator is None:
        accelerator = PartialState()
    tqdm_kwargs.setdefault("disable", not accelerator.is_local_main_process)
    cls = TextProgressBar if STATE.event_sink is not None else AutoProgressBar
    return cls(iterable, report=report, **tqdm_kwargs)
