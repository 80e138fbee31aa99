"""Entry point of the ``nbaccel`` console script: dispatches to one module per subcommand."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence

from ..version import __version__
from . import config, demo, env, launch, merge_weights, test, to_fsdp2
from .parsing import register

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(prog="nbaccel", description=__doc__)
    parser.add_argument("--version", action="version", version=f"nbaccel {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in (config, demo, env, launch, merge_weights, test, to_fsdp2):
        register(subparsers, command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        _command_parser(parser, args).error(_unrecognized(parser, args, extra))
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    return int(handler(args))


def _command_parser(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The (sub)command's own parser, so that an error shows that command's usage."""
    for name in ("command", "config_command"):
        chosen = getattr(args, name, None)
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if chosen is None or not subs:
            break
        parser = subs[0].choices[chosen]
    return parser


def _unrecognized(
    parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]
) -> str:
    message = f"unrecognized arguments: {' '.join(extra)}"
    options = [o for a in _command_parser(parser, args)._actions for o in a.option_strings]
    for item in extra:
        meant = difflib.get_close_matches(item.split("=")[0], options, n=1, cutoff=0.8)
        if item.startswith("-") and meant:
            message += f" (did you mean {meant[0]}?)"
            break
    return message


if __name__ == "__main__":
    sys.exit(main())
