"""LaunchDashboard: the live view of a launch, drawn by the notebook's own process."""

from __future__ import annotations

import html
import threading
import time
from typing import Any

import ipywidgets as widgets
import traitlets

from ..launch.events import EventSink
from .kernelpump import MessagePump, blocks_a_kernel, open_message_pump
from .state import DashboardState

__all__ = ["LaunchDashboard"]

_COLOURS = {
    "starting": "#888",
    "running": "#1565c0",
    "finished": "#2e7d32",
    "failed": "#c62828",
    "stopped": "#ef6c00",
    "idle": "#2e7d32",
    "interrupted": "#ef6c00",
    "dead": "#c62828",
}
# Shown under the Stop button when this kernel cannot hear its click during a blocking launch.
STOP_UNAVAILABLE = (
    "Stop cannot act while this launch blocks the cell: this kernel reads no widget message "
    "until the cell ends. Interrupt the kernel instead (the notebook's stop button); that "
    "stops every rank the same way."
)
_COLUMNS = ("rank", "state", "pid", "progress", "steps/s", "RSS", "GPU memory", "metrics")


class LaunchDashboard(widgets.VBox):
    """Per-rank state, output, progress, speed, memory, a Stop button and a summary.

    Feed it to ``notebook_launcher(..., dashboard=board)`` (``dashboard=True`` makes one).
    Everything is drawn by the notebook's process from the launcher's events and the output
    relay's lines; workers never touch a widget.

    Args:
        refresh_s: seconds between redraws (and memory readings) while a launch runs.
    """

    status = traitlets.Unicode("idle", help="idle, running, finished, failed or stopped")
    elapsed = traitlets.Float(0.0, help="seconds since the launch began")

    def __init__(self, refresh_s: float = 0.5, **kwargs: Any) -> None:
        self.state = DashboardState()
        self.refresh_s = refresh_s
        self._title = widgets.HTML("<b>nbaccel launch</b>: not started")
        self._bar = widgets.IntProgress(value=0, min=0, max=1, layout={"width": "50%"})
        self._bar_text = widgets.Label("")
        self._table = widgets.HTML("")
        self._outputs = widgets.Tab(children=[])
        self._output_views: list[widgets.HTML] = []
        self._stop = widgets.Button(
            description="Stop", button_style="danger", icon="stop", disabled=True
        )
        self._stop.on_click(lambda _button: self.stop())
        self._where = widgets.Button(
            description="Where?",
            icon="search",
            disabled=True,
            tooltip="where every rank is now: its line, the collective it waits in, for how long",
        )
        self._where.on_click(lambda _button: self.show_where())
        self._where_view = widgets.HTML("")
        self._stop_note = widgets.HTML("")
        self._stop_unavailable = False
        self._summary = widgets.HTML("")
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._redraw_lock = threading.Lock()
        self._pump: MessagePump | None = None
        children = [
            self._title,
            widgets.HBox([self._bar, self._bar_text]),
            self._table,
            self._outputs,
            widgets.HBox([self._stop, self._where]),
            self._where_view,
            self._stop_note,
            self._summary,
        ]
        super().__init__(children=children, **kwargs)

    # -- the launcher's side (see notebook_launcher(dashboard=...)) ----------------------------
    @property
    def stop_requested(self) -> threading.Event:
        """Set by :meth:`stop`; the launcher checks it every ``monitor_interval``."""
        return self.state.stop_requested

    def begin(self, num_processes: int, first_rank: int = 0) -> None:
        """A launch starts: one row and one output tab per rank; redraws start."""
        self.state.begin(num_processes, first_rank)
        self._output_views = [widgets.HTML("") for _ in range(num_processes)]
        self._outputs.children = self._output_views
        for i in range(num_processes):
            self._outputs.set_title(i, f"rank {first_rank + i}")
        self._summary.value = ""
        # A launch that blocks the kernel's cell: let the kernel see the Stop click meanwhile,
        # or, on a kernel where that cannot be done, say so instead of showing a dead button.
        self._pump = open_message_pump()
        self._stop_unavailable = self._pump is None and blocks_a_kernel()
        note = f"<i>{html.escape(STOP_UNAVAILABLE)}</i>" if self._stop_unavailable else ""
        self._stop_note.value = note
        self.status = "running"
        self._redraw()
        self._wake.clear()
        self._thread = threading.Thread(target=self._refresh, name="nbaccel-dashboard", daemon=True)
        self._thread.start()

    def set_machines(self, node_rank: int, num_nodes: int, per_machine: int, fixed: bool) -> None:
        """A multi-node launch: the title says where the other machines' ranks report."""
        self.state.set_machines(node_rank, num_nodes, per_machine, fixed)
        self._redraw()

    def set_hosts(self, hosts: dict[int, str]) -> None:
        """A launch on ``hosts=[...]``: each rank's machine, beside its rank."""
        self.state.set_hosts(hosts)
        self._redraw()

    def on_wait(self) -> None:
        """Called by the launcher between its waits: handle the front end's widget messages
        (the Stop click) when the launch blocks the kernel (see :mod:`.kernelpump`)."""
        if self._pump is not None:
            self._pump.poll()

    def release_messages(self) -> None:
        """A pool's call ended: the kernel gets every message the pump kept during the call (a
        cell queued meanwhile runs next); the pump stays open for the pool's next call."""
        if self._pump is not None:
            self._pump.close()

    def chain(self, on_event: EventSink | None) -> EventSink:
        """An ``on_event`` that feeds the dashboard, then calls ``on_event``."""
        return self.state.chain(on_event)

    def line_sink(self, local_rank: int, stream: str, line: str) -> None:
        """One output line of a rank (from the output relay's thread)."""
        self.state.line_sink(local_rank, stream, line)

    def set_pids(self, pids: dict[int, int]) -> None:
        """Global rank -> pid, for the memory columns."""
        self.state.set_pids(pids)

    def end(self, error: BaseException | None) -> None:
        """The launch is over: final redraw and the summary."""
        pump, self._pump = self._pump, None
        if pump is not None:
            pump.close()
        thread, self._thread = self._thread, None
        self._wake.set()
        if thread is not None:
            thread.join(5.0)
        self.state.end(error)
        self.status = self.state.outcome
        self._redraw()
        text = html.escape(self.state.summary())
        self._summary.value = f"<pre style='margin:0'><b>Summary</b>\n{text}</pre>"

    def show_where(self) -> None:
        """Ask every rank of the running launch or pool call where it is now, and show the
        table under the buttons (what ``%nbaccel where`` returns)."""
        # the launcher's side, read only when the button is clicked
        from ..launch.parent.watch import running_watches

        running = running_watches()
        if not running:
            self._where_view.value = "<i>Nothing runs now: no rank to ask.</i>"
            return
        table = running[-1].where()
        asked = time.strftime("%H:%M:%S")
        self._where_view.value = f"<b>Where every rank is</b> ({asked}){table._repr_html_()}"

    def stop(self) -> None:
        """Stop every rank (SIGTERM, then SIGKILL): the launch raises ``LaunchStopped``."""
        self.state.stop()
        self._stop.description = "Stopping..."
        self._stop.disabled = True

    # -- drawing -------------------------------------------------------------------------------
    @traitlets.observe("status")
    def _status_changed(self, change: dict[str, Any]) -> None:
        running = change["new"] == "running"
        self._stop.disabled = not running or self._stop_unavailable
        self._where.disabled = not running or self._stop_unavailable
        self._stop.description = "Stopped" if change["new"] == "stopped" else "Stop"

    def _refresh(self) -> None:
        ticks = 0
        while not self._wake.wait(self.refresh_s):
            if ticks % 2 == 0:
                self.state.sample_memory()
            ticks += 1
            try:
                self._redraw()
            except Exception:  # a closed comm must not kill the thread noisily
                return

    def _redraw(self) -> None:
        with self._redraw_lock, self.state.lock:
            state = self.state
            self.elapsed = round(state.elapsed, 1)
            colour = _COLOURS.get(state.outcome, "#000")
            self._title.value = (
                f"<b>nbaccel launch</b>: <span style='color:{colour}'>"
                f"{html.escape(state.headline())}</span>"
            )
            bar = state.main_bar
            if bar is not None:
                n, total, desc = bar
                self._bar.max = max(total or n or 1, 1)
                self._bar.value = min(n, self._bar.max)
                shown = f"{n}/{total}" if total else str(n)
                self._bar_text.value = f"{desc + ': ' if desc else ''}{shown} (rank 0)"
            self._table.value = self._table_html()
            for view, out in zip(state.ranks.values(), self._output_views, strict=False):
                text = html.escape("\n".join(view.lines))
                new = f"<pre style='max-height:14em;overflow:auto;margin:0'>{text}</pre>"
                if out.value != new:
                    out.value = new

    def _table_html(self) -> str:
        head = "".join(f"<th style='padding:2px 8px'>{c}</th>" for c in _COLUMNS)
        rows = []
        for view in self.state.ranks.values():
            cells = view.row()
            colour = _COLOURS.get(view.state, "#000")
            tds = []
            for column in _COLUMNS:
                style = (
                    f"padding:2px 8px;color:{colour}" if column == "state" else "padding:2px 8px"
                )
                tds.append(f"<td style='{style}'>{html.escape(cells[column])}</td>")
            rows.append(f"<tr>{''.join(tds)}</tr>")
        return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"

    # -- for tests and the text fallback -------------------------------------------------------
    def summary(self) -> str:
        """The summary text (as shown under the dashboard when a launch ends)."""
        return self.state.summary()
