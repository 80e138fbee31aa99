"""The worker side of the display channel: rich output and notebook bars become messages.

A worker cannot talk to the notebook's front end: a forked child's messages are dropped by the
Jupyter protocol (``attempted to send message from fork``) and a spawned one has no kernel at
all. :func:`install_worker_display` is called once when a worker starts (a one-task worker of
``notebook_launcher`` or a long-lived one): from then on IPython's ``display()``, display
handles (``update_display``), ``clear_output`` and ``tqdm.notebook`` / ``tqdm.auto`` bars made
in the worker are turned into :class:`DisplayEvent` and :class:`BarEvent` messages, sent over
the worker's message pipe; :mod:`nbaccel.launch.parent.render` draws them in the cell.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

from ..events import BarEvent, DisplayEvent, Event
from .bars import notebook_bars_build

__all__ = ["install_worker_display", "load_before_fork"]

Send = Callable[[Event], None]


def _flush_text() -> None:
    """Push this rank's pending text into the relay first: it was written before the display."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _publisher_class() -> type:
    # IPython is there only in a notebook (the notebook extra)
    from IPython.core.displaypub import DisplayPublisher

    class WorkerDisplayPublisher(DisplayPublisher):
        """IPython's display publisher for a launched worker: sends each bundle to the parent."""

        def __init__(self, send: Send, rank: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._send = send
            self._rank = rank

        def publish(
            self,
            data: dict[str, Any],
            metadata: dict[str, Any] | None = None,
            source: Any = None,
            *,
            transient: dict[str, Any] | None = None,
            update: bool = False,
            **kwargs: Any,
        ) -> None:
            _flush_text()
            self._send(
                DisplayEvent(
                    rank=self._rank,
                    data=dict(data),
                    metadata=dict(metadata or {}),
                    transient=dict(transient or {}),
                    update=bool(update),
                )
            )

        def clear_output(self, wait: bool = False) -> None:
            _flush_text()
            self._send(DisplayEvent(rank=self._rank, kind="clear", wait=bool(wait)))

    return WorkerDisplayPublisher


def _worker_shell() -> Any:
    """The IPython shell of this worker: the kernel's (inherited by fork) or a new one.

    A spawned worker gets a plain ``InteractiveShell`` whose config names ``IPKernelApp``, as
    the kernel's does (and ipykernel's shell module is loaded), so that libraries which look
    for a notebook (``tqdm.auto``, Transformers) choose their notebook output here as they do
    in a forked worker.
    """
    if sys.stdin is None or sys.stdin.closed:  # spawn closes it; IPython 7 asks it isatty()
        sys.stdin = open(os.devnull)  # noqa: SIM115 - the worker's stdin for its lifetime
    # IPython is there only in a notebook (the notebook extra)
    from IPython.core.interactiveshell import InteractiveShell

    if InteractiveShell.initialized():
        return InteractiveShell.instance()
    # traitlets comes with IPython (the notebook extra)
    from traitlets.config import Config

    try:  # tqdm.auto takes a loaded ipykernel shell module as the sign of a notebook
        import ipykernel.zmqshell  # noqa: F401
    except ImportError:  # pragma: no cover - ipykernel is in the notebook extra
        pass

    class WorkerShell(InteractiveShell):
        """The shell of a spawned worker, which already has the kernel's ``sys.path``.

        IPython's start-up adds ``$VIRTUAL_ENV``'s packages to the path (with a warning that
        would reach the cell) when the interpreter is not that venv's; the kernel did that
        once already, and its path is the worker's.
        """

        def init_virtualenv(self) -> None:
            return None

    config = Config()
    config["IPKernelApp"] = Config()
    config["HistoryManager"] = Config({"enabled": False})
    shell = WorkerShell.instance(config=config, user_module=sys.modules["__main__"])
    _choose_again("tqdm.autonotebook", "tqdm.auto")  # imported (with nbaccel) before the shell
    return shell


def _choose_again(*names: str) -> None:
    """Import again modules that chose between notebook and text output when imported."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tqdm.autonotebook's "notebook mode" notice
        for name in names:
            module = sys.modules.get(name)
            if module is not None:
                importlib.reload(module)


class _NullFile:
    """Where a worker's notebook bar would write text: nowhere (the parent draws it)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def _bar_class(send: Send, rank: int) -> type:
    # tqdm loads in a worker only once it draws a bar
    from tqdm.asyncio import tqdm_asyncio

    class WorkerBar(tqdm_asyncio):
        """A ``tqdm.notebook`` bar in a worker: its state goes to the parent, which draws it."""

        monitor_interval = 0  # no monitor thread per worker

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.pop("display", None)  # tqdm.notebook-only arguments
            kwargs.pop("colour", None)
            kwargs["file"] = _NullFile()
            self._bar_id = id(self)  # unique while the bar lives; closing ends it here
            super().__init__(*args, **kwargs)

        def _event(self, state: str) -> BarEvent:
            values = self.format_dict
            values["bar_format"] = (values["bar_format"] or "{l_bar}<bar/>{r_bar}").replace(
                "{bar}", "<bar/>"
            )
            values["ncols"] = None
            return BarEvent(
                rank=rank,
                n=int(self.n),
                total=None if self.total is None else int(self.total),
                desc=str(self.desc or ""),
                bar_id=self._bar_id,
                meter=self.format_meter(**values),
                state=state,
                leave=bool(self.leave) if self.leave is not None else True,
            )

        def display(self, msg: str | None = None, pos: int | None = None) -> bool:
            send(self._event("open"))
            return True

        def close(self) -> None:
            if self.disable:
                return
            super().close()
            send(self._event("closed"))

    return WorkerBar


def load_before_fork() -> None:
    """Load in the launcher what :func:`install_worker_display` loads in each rank
    (``tqdm.notebook``, and with it ``ipywidgets``: tens of milliseconds), so that ranks
    forked from it find it loaded: once a kernel, not once a rank at every launch."""
    if "tqdm.notebook" not in sys.modules:
        import tqdm.notebook  # noqa: F401 - what the ranks patch, loaded before they fork


def install_worker_display(send: Send, rank: int) -> None:
    """Send this worker's rich output and notebook bars to the parent through ``send``.

    Call once, at worker start, in a worker whose parent is a Jupyter kernel.
    """
    shell = _worker_shell()
    shell.display_pub = _publisher_class()(send, rank, parent=shell)
    notebook_bars_build(_bar_class(send, rank), load=True)
