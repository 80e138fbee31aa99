"""The ``%nbaccel`` line magic and the ``%%nbaccel`` cell magic: one pool per kernel."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeVar, cast

from IPython.core import magic
from IPython.core.error import UsageError
from IPython.core.magic import Magics, magics_class

from .arguments import LINE_USAGE, parse_cell_line, parse_line, pool_options
from .auto import AutoCells
from .show import StatusTable, cell_value

__all__ = ["PoolMagics"]

_Method = TypeVar("_Method", bound=Callable[..., Any])


def _named(kind: str, name: str) -> Callable[[_Method], _Method]:
    """IPython's ``line_magic(name)``/``cell_magic(name)``, typed as the decorator it returns.

    IPython 9 annotates the marker's result as "a function or a decorator", which a type
    checker cannot call; the named form always returns the decorator.
    """
    marker = magic.line_magic if kind == "line" else magic.cell_magic
    return cast(Callable[[_Method], _Method], marker(name))


@magics_class
class PoolMagics(Magics):
    """Holds this kernel's pool (``pool``, None while none runs) and the auto-mode switch."""

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.pool: Any = None
        self.auto = AutoCells(shell)

    # -- %nbaccel --------------------------------------------------------------------------
    @_named("line", "nbaccel")
    def nbaccel_line(self, line: str) -> Any:
        """Start, inspect, restart or stop the kernel's worker pool; switch auto mode."""
        options = parse_line(line)
        command = getattr(self, f"_{options.command}")
        return command(options)

    def _start(self, options: argparse.Namespace) -> None:
        if self.pool is not None:
            raise UsageError(
                "%nbaccel start: a pool is already running in this kernel; use "
                "%nbaccel restart for a fresh one, or %nbaccel stop first."
            )
        # the pool's core and its errors live with the launcher, loaded when a pool starts
        from ..launch.parent.errors import HostError  # loaded with the pool's core
        from ..launch.parent.pool import WorkerPool  # the pool's core lives with the launcher

        try:
            pool = WorkerPool(**pool_options(options))
        except (ValueError, TypeError) as err:  # a bad value: say it as a usage error
            raise UsageError(f"%nbaccel start: {err}\nusage:\n{LINE_USAGE}") from None
        except (HostError, ConnectionError, ImportError) as err:
            # no machine, no cluster, no Ray: the message says what to do; a traceback of the
            # launcher's own frames would only hide it
            raise UsageError(f"%nbaccel start: {err}") from None
        self.pool = pool
        on = f" on {', '.join(pool.hosts)}" if pool.hosts is not None else ""
        print(f"nbaccel: a pool of {pool.world_size} processes{on} is ready.")

    def _status(self, options: argparse.Namespace) -> Any:
        return StatusTable(self._require("status").status())

    def _where(self, options: argparse.Namespace) -> Any:
        """Where every rank of the running pool call or launch is, else of the idle pool."""
        # the watch lives with the launcher; read only when asked
        from ..launch.parent.watch import running_watches

        running = running_watches()
        if running:
            return running[-1].where()
        if self.pool is None:
            raise UsageError(
                "%nbaccel where: nothing runs in this kernel: no pool (%nbaccel start -n 2) "
                "and no notebook_launcher call."
            )
        return self.pool.where()

    def _restart(self, options: argparse.Namespace) -> None:
        self._require("restart").restart()
        print("nbaccel: the pool restarted; every rank's namespace is new.")

    def _stop(self, options: argparse.Namespace) -> None:
        pool, self.pool = self.pool, None
        self.auto.switch(False)
        if pool is None:
            print("nbaccel: no pool is running.")
            return
        pool.shutdown()
        print("nbaccel: the pool is stopped.")

    def _auto(self, options: argparse.Namespace) -> None:
        if options.switch is None:
            print(f"nbaccel: auto mode is {'on' if self.auto.active else 'off'}.")
            return
        if options.switch == "on":
            self._require("auto on")
        self.auto.switch(options.switch == "on")
        if options.switch == "on":
            print(
                "nbaccel: auto mode is on; every following cell runs on the pool "
                "(%nbaccel auto off to stop)."
            )
        else:
            print("nbaccel: auto mode is off; cells run in this kernel.")

    def _require(self, what: str) -> Any:
        if self.pool is None:
            raise UsageError(
                f"%nbaccel {what}: no pool is running in this kernel; start one first, "
                "e.g. %nbaccel start -n 2"
            )
        return self.pool

    # -- %%nbaccel -------------------------------------------------------------------------
    @_named("cell", "nbaccel")
    def nbaccel_cell(self, line: str, cell: str) -> Any:
        """Run the cell on every rank of the pool (``--ranks 0,1``: on those ranks)."""
        ranks = parse_cell_line(line)["ranks"]
        pool = self.pool
        if pool is None:
            raise UsageError(
                "%%nbaccel: no pool is running in this kernel; start one first, e.g. "
                "%nbaccel start -n 2 (then run this cell again)."
            )
        size = _world_size(pool)
        if ranks is not None and size is not None and max(ranks) >= size:
            raise UsageError(
                f"%%nbaccel --ranks {','.join(map(str, ranks))}: the pool has ranks "
                f"0 to {size - 1}."
            )
        count = _cell_number(self.shell)
        label = f"In [{count}]" if count is not None else None  # where tables name the cell
        values = pool.execute(cell, ranks=ranks, label=label)
        chosen = list(range(len(values))) if ranks is None else ranks
        return cell_value(chosen, values)


def _cell_number(shell: Any) -> int | None:
    """The number of the running cell, ``In [N]``: IPython stores a cell's input before it
    runs it (its ``execution_count`` is already the next one's in IPython 9, not in 8)."""
    inputs = getattr(getattr(shell, "history_manager", None), "input_hist_parsed", None)
    if inputs:
        return len(inputs) - 1
    count = getattr(shell, "execution_count", None)
    return count if isinstance(count, int) else None


def _world_size(pool: Any) -> int | None:
    for name in ("num_processes", "world_size"):
        size = getattr(pool, name, None)
        if isinstance(size, int):
            return size
    return None
