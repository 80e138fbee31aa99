"""Entry point of the ``nbaccel`` console script: dispatches to one module per subcommand."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .. import __version__
from . import demo, env

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(prog="nbaccel", description=__doc__)
    parser.add_argument("--version", action="version", version=f"nbaccel {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo.add_parser(subparsers)
    env.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    return int(handler(args))


if __name__ == "__main__":
    sys.exit(main())
