"""Parse the ``%nbaccel`` and ``%%nbaccel`` magic lines; a bad line is a usage error."""

from __future__ import annotations

import argparse
import shlex
from typing import Any, NoReturn

from IPython.core.error import UsageError

from ..config.hosts import RAY, SLURM, is_ray, is_slurm
from ..config.schema import DEFAULT_STALL_TIMEOUT

__all__ = ["LINE_USAGE", "parse_cell_line", "parse_line", "parse_ranks", "pool_options"]

LINE_USAGE = """\
%nbaccel start -n N [--mixed_precision no|fp16|bf16|fp8] [--start_method auto|fork|spawn] [--cpu]
               [--timeout S] [--stall_timeout S|none] [--on_stall warn|raise]
               [--hosts node1,node2|slurm|ray [--num_nodes N] [--python PATH] [--cwd DIR]
                [--connect_timeout S]]
                     (-n ranks on each host, started over ssh, in the SLURM allocation or
                      on a Ray cluster's nodes: --num_nodes of them, default all that fit)
%nbaccel status      the pool's ranks: pid, state, current cell, memory, device
%nbaccel where       every rank's line and the collective it waits in (pool or launch)
%nbaccel restart     a fresh process group (every rank's namespace is emptied)
%nbaccel stop        shut the pool down
%nbaccel auto on|off every following cell runs on the pool (line magics still run here)
%%nbaccel [--ranks 0 | 0,1]   run this cell on every rank of the pool, or on some"""


class _Parser(argparse.ArgumentParser):
    """An argparse parser that raises :class:`UsageError` instead of exiting the kernel."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}\nusage:\n{LINE_USAGE}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise UsageError(message or f"usage:\n{LINE_USAGE}")


def _line_parser() -> _Parser:
    parser = _Parser(prog="%nbaccel", add_help=False)
    commands = parser.add_subparsers(dest="command", parser_class=_Parser)
    start = commands.add_parser("start", prog="%nbaccel start", add_help=False)
    start.add_argument("-n", "--num_processes", type=int, default=None)
    start.add_argument("--mixed_precision", default=None)
    start.add_argument("--start_method", default="auto")
    start.add_argument("--cpu", action="store_true", default=None)
    start.add_argument("--timeout", type=float, default=None)
    start.add_argument("--stall_timeout", type=_seconds_or_none, default=DEFAULT_STALL_TIMEOUT)
    start.add_argument("--on_stall", default=None)
    start.add_argument("--hosts", type=_hosts, default=None)
    start.add_argument("--python", default=None)
    start.add_argument("--cwd", default=None)
    start.add_argument("--connect_timeout", type=float, default=None)
    start.add_argument("--num_nodes", type=int, default=None)  # with --hosts ray
    for name in ("status", "where", "restart", "stop"):
        commands.add_parser(name, prog=f"%nbaccel {name}", add_help=False)
    auto = commands.add_parser("auto", prog="%nbaccel auto", add_help=False)
    auto.add_argument("switch", nargs="?", choices=["on", "off"], default=None)
    return parser


def _seconds_or_none(text: str) -> float | None:
    """``--stall_timeout 60`` or ``--stall_timeout none`` (no watch)."""
    if text.strip().lower() in ("none", "off"):
        return None
    return float(text)


def _hosts(text: str) -> list[str] | str:
    """``--hosts node1,node2`` (a list), ``--hosts slurm`` or ``--hosts ray``; the entries are
    checked with the pool's other arguments."""
    if is_slurm(text):
        return SLURM
    if is_ray(text):
        return RAY
    return [entry.strip() for entry in text.split(",")]


def _split(line: str, prog: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as err:
        raise UsageError(f"{prog}: cannot read {line!r} ({err}).\nusage:\n{LINE_USAGE}") from None


def parse_line(line: str) -> argparse.Namespace:
    """The options of a ``%nbaccel`` line; :class:`UsageError` for a bad one."""
    words = _split(line, "%nbaccel")
    if not words:
        raise UsageError(f"%nbaccel needs a command.\nusage:\n{LINE_USAGE}")
    options = _line_parser().parse_args(words)
    if options.command == "start" and options.num_processes is None:
        raise UsageError(
            "%nbaccel start: say how many processes, e.g. %nbaccel start -n 2\n"
            f"usage:\n{LINE_USAGE}"
        )
    return options


def pool_options(options: argparse.Namespace) -> dict[str, Any]:
    """The options of a ``%nbaccel start`` line as the pool's keyword arguments: each flag
    is named after the ``WorkerPool`` argument it sets."""
    return {name: value for name, value in vars(options).items() if name != "command"}


def parse_ranks(text: str) -> list[int]:
    """``"0"`` or ``"0,1"`` as a list of ranks; :class:`UsageError` for anything else."""
    try:
        ranks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        ranks = []
    if not ranks or any(rank < 0 for rank in ranks) or len(set(ranks)) != len(ranks):
        raise UsageError(
            f"%%nbaccel --ranks {text!r}: give ranks as numbers separated by commas, each "
            "once, e.g. --ranks 0 or --ranks 0,1."
        )
    return ranks


def parse_cell_line(line: str) -> dict[str, Any]:
    """The options of a ``%%nbaccel`` line: ``{"ranks": None or [ranks]}``."""
    parser = _Parser(prog="%%nbaccel", add_help=False)
    parser.add_argument("--ranks", default=None)
    options = parser.parse_args(_split(line, "%%nbaccel"))
    return {"ranks": None if options.ranks is None else parse_ranks(options.ranks)}
