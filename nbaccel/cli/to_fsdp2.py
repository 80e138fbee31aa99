"""``nbaccel to-fsdp2``: convert a config file's version-1 ``fsdp_config`` to version 2."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..config import (
    ConfigError,
    config_location,
    convert_to_fsdp2,
    load_config_file,
    save_config_file,
)
from .parsing import config_file_option

__all__ = ["NAME", "SUMMARY", "add_arguments", "run"]

NAME = "to-fsdp2"
SUMMARY = "convert a version-1 FSDP config file to the version-2 form"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``nbaccel to-fsdp2``."""
    config_file_option(parser, "file to convert", "the one in force")
    parser.add_argument(
        "--output_file", default=None, help="where to write (default: with --overwrite, in place)"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="allow writing over an existing file"
    )


def run(args: argparse.Namespace) -> int:
    """Convert, write, and list what changed."""
    try:
        path, origin = config_location(args.config_file)
        if path is None:
            raise ConfigError(f"no config file to convert ({origin}); pass --config_file.")
        loaded = load_config_file(path, origin, report=None)
        if not loaded.config.fsdp_config.values:
            raise ConfigError(f"{path}: has no fsdp_config to convert.")
        output = Path(args.output_file) if args.output_file else None
        if output is None and not args.overwrite:
            raise ConfigError("pass --output_file, or --overwrite to convert the file in place.")
        output = output or path
        if output.exists() and not args.overwrite:
            raise ConfigError(f"{output} exists; pass --overwrite to replace it.")
        fsdp, notes = convert_to_fsdp2(loaded.config.fsdp_config)
        save_config_file(loaded.config.replace(fsdp_config=fsdp), output)
    except ConfigError as exc:
        print(f"nbaccel to-fsdp2: {exc}", file=sys.stderr)
        return 2  # a bad config file is a usage error
    for note in notes:
        print(f"  {note}")
    print(f"nbaccel to-fsdp2: wrote the version-2 config to {output}")
    return 0
