"""The parent side of the display channel: draw the workers' rich output in the cell.

:class:`CellRenderer` takes the :class:`~nbaccel.launch.events.DisplayEvent` and
:class:`~nbaccel.launch.events.BarEvent` messages of the ranks it shows and publishes them
from the notebook's own process (the only one the front end hears), on the thread of the
running cell. A worker's display ids are mapped to ids of the parent's own, so a display
handle's ``update`` replaces its output in place; notebook bars become real ``tqdm.notebook``
bars. Before a rank's output is drawn, its text written so far is drained from the output
relay, so text and rich output of one rank keep their order.
"""

from __future__ import annotations

import html
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Any

from ...environment import in_notebook
from ..events import BarEvent, DisplayEvent, Event, EventSink

__all__ = ["CellRenderer", "cell_renderer"]

_LABEL_STYLE = "font-family:monospace;font-size:smaller;opacity:0.7"


class CellRenderer:
    """Draws the rich output of the ranks in ``ranks`` in the running cell.

    Args:
        ranks: global ranks whose output is shown; the others' is dropped.
        prefixes: global rank -> the rank's text prefix (``[rank1]: ``).
        label: put the rank's prefix on every output (when ranks other than 0 are shown).
        before_draw: called with a global rank before its output is drawn (drains its text).
    """

    def __init__(
        self,
        ranks: Collection[int],
        prefixes: Mapping[int, str],
        label: bool,
        before_draw: Callable[[int], None] | None = None,
    ) -> None:
        self.ranks = frozenset(ranks)
        self.prefixes = dict(prefixes)
        self.label = label
        self.before_draw = before_draw
        self._ids: dict[tuple[int, str], str] = {}
        self._bars: dict[tuple[int, int], Any] = {}

    def chain(self, on_event: EventSink | None) -> EventSink:
        """An ``on_event`` callback: draws display messages, passes every other event on.

        Bars are progress events too, so they also reach ``on_event`` (the dashboard)."""

        def handle(event: Event) -> None:
            if isinstance(event, DisplayEvent):
                self.draw(event)
                return
            if isinstance(event, BarEvent):
                self.draw_bar(event)
            if on_event is not None:
                on_event(event)

        return handle

    def _prepare(self, rank: int) -> bool:
        if rank not in self.ranks:
            return False
        if self.before_draw is not None:
            self.before_draw(rank)
        return True

    # -- rich output -----------------------------------------------------------------------
    def draw(self, event: DisplayEvent) -> None:
        """Publish one display message of a rank (if that rank is shown)."""
        if not self._prepare(event.rank):
            return
        # IPython is there only in a notebook (the notebook extra)
        from IPython.display import clear_output, publish_display_data

        if event.kind == "clear":
            clear_output(wait=event.wait)
            return
        transient = dict(event.transient)
        worker_id = transient.get("display_id")
        if worker_id is not None:
            key = (event.rank, str(worker_id))
            if event.update and key not in self._ids:
                return  # an update of an output that was never shown shows nothing
            transient["display_id"] = self._ids.setdefault(key, uuid.uuid4().hex)
        data = self._labelled(event.rank, event.data, first=not event.update)
        metadata = dict(event.metadata)
        metadata["nbaccel"] = {"rank": event.rank}
        publish_display_data(data, metadata, transient=transient, update=event.update)

    def _labelled(self, rank: int, data: dict[str, Any], first: bool) -> dict[str, Any]:
        if not self.label:
            return data
        prefix = self._label(rank)
        out = dict(data)
        if isinstance(out.get("text/plain"), str):
            out["text/plain"] = prefix + out["text/plain"]
        if isinstance(out.get("text/html"), str):
            tag = f'<div style="{_LABEL_STYLE}">{html.escape(prefix.strip())}</div>'
            out["text/html"] = tag + out["text/html"]
        if isinstance(out.get("text/markdown"), str):
            out["text/markdown"] = f"`{prefix.strip()}`\n\n" + out["text/markdown"]
        elif first and "text/html" not in out and set(out) - {"text/plain"}:
            print(prefix.rstrip(), flush=True)  # an image: its label goes on the line above
        return out

    # -- progress bars ---------------------------------------------------------------------
    def draw_bar(self, event: BarEvent) -> None:
        """Create, update or close the notebook bar that stands for a rank's bar."""
        if not self._prepare(event.rank):
            return
        key = (event.rank, event.bar_id)
        bar = self._bars.get(key)
        if bar is None:
            if event.state == "closed" and not event.leave:
                return
            bar = self._bars[key] = _new_bar(event.total, self._label(event.rank) + event.desc)
        bar.n = event.n
        if event.total != bar.total:
            bar.total = event.total
            bar.container.children[1].max = event.total or 1
        meter = self._label(event.rank) + event.meter
        if event.state != "closed":
            bar.display(msg=meter)
            return
        del self._bars[key]
        _finish(bar, meter, event)

    def _label(self, rank: int) -> str:
        return self.prefixes.get(rank, f"[rank{rank}]: ") if self.label else ""

    def close(self) -> None:
        """Mark the bars still open (their rank ended without closing them) as stopped."""
        for bar in self._bars.values():
            bar.display(bar_style="danger", check_delay=False)
            bar.disable = True
        self._bars.clear()
        self._ids.clear()


def cell_renderer(
    display_ranks: tuple[int, ...] | None,
    ranks: Mapping[int, int],
    prefixes: Mapping[int, str],
    drain: Callable[[int], None],
) -> CellRenderer | None:
    """The renderer of one launch, or None outside a Jupyter kernel (then workers keep text).

    Args:
        display_ranks: the global ranks to show (None: all).
        ranks: local rank -> global rank of this machine's workers.
        prefixes: local rank -> text prefix.
        drain: streams a local rank's pending text (``OutputRelay.drain``).
    """
    if not in_notebook():
        return None
    local = {rank: local_rank for local_rank, rank in ranks.items()}
    shown = set(local) if display_ranks is None else set(display_ranks) & set(local)
    return CellRenderer(
        shown,
        {rank: prefixes[local_rank] for rank, local_rank in local.items()},
        label=display_ranks != (0,),
        before_draw=lambda rank: drain(local[rank]),
    )


def _bar_class() -> type:
    # tqdm's notebook bar needs ipywidgets (the widgets extra)
    from tqdm.notebook import tqdm_notebook

    class ParentBar(tqdm_notebook):
        """A notebook bar drawn for a worker's bar: shows the worker's numbers, keeps no
        monitor thread."""

        monitor_interval = 0

    return ParentBar


def _new_bar(total: int | None, desc: str) -> Any:
    try:
        return _bar_class()(total=total, desc=desc, mininterval=0, miniters=0)
    except ImportError:  # no ipywidgets in this kernel: the bar's final line, as text
        return _TextBar(total)


class _TextBar:
    """Stands in for a notebook bar where ipywidgets is missing: prints the final state."""

    def __init__(self, total: int | None) -> None:
        self.n, self.total, self.disable = 0, total, False
        self.container = self

    @property
    def children(self) -> list[Any]:
        return [self, self, self]

    def display(self, msg: str | None = None, close: bool = False, **_: Any) -> None:
        if msg and (self.disable or "bar_style" in _):
            print(msg.replace("<bar/>", "|"), flush=True)


def _finish(bar: Any, meter: str, event: BarEvent) -> None:
    failed = bool(event.total) and event.n < (event.total or 0)
    if failed:
        bar.display(msg=meter, bar_style="danger", check_delay=False)
    elif event.leave:
        bar.display(msg=meter, bar_style="success", check_delay=False)
    else:
        bar.display(close=True, check_delay=False)
    bar.disable = True  # closing it here would redraw it with the parent's own numbers
