"""What every subcommand's parser shares: how it is registered, and ``--config_file``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Protocol

__all__ = ["Command", "config_file_option", "register"]


class Command(Protocol):
    """A subcommand module: ``NAME`` on the command line, ``SUMMARY`` in the command list,
    its docstring as its own ``--help``, its options, and ``run`` (returns the exit code)."""

    NAME: str
    SUMMARY: str
    __doc__: str | None
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def register(subparsers: argparse._SubParsersAction, command: Command) -> None:
    """Add ``nbaccel <command.NAME>`` to the parser."""
    parser = subparsers.add_parser(
        command.NAME,
        help=command.SUMMARY,
        description=command.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.add_arguments(parser)
    parser.set_defaults(handler=command.run)


def config_file_option(parser: argparse.ArgumentParser, what: str, default: str) -> None:
    """``--config_file``: ``what`` the command does with the file, and which file it takes
    when the option is left out."""
    parser.add_argument("--config_file", default=None, help=f"{what} (default: {default})")
