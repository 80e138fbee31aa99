"""``nbaccel merge-weights``: merge a sharded FSDP checkpoint into one weights file."""

from __future__ import annotations

import argparse
import sys

from ..fsdp.merge import merge_checkpoint

__all__ = ["NAME", "SUMMARY", "add_arguments", "run"]

NAME = "merge-weights"
SUMMARY = "merge a sharded FSDP checkpoint into model.safetensors (or pytorch_model.bin)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``nbaccel merge-weights``."""
    parser.add_argument(
        "checkpoint_directory",
        metavar="CHECKPOINT_DIR",
        help="a sharded checkpoint directory, e.g. <checkpoint>/pytorch_model_fsdp_0",
    )
    parser.add_argument(
        "output_path", metavar="OUTPUT_PATH", help="directory to write the merged file into"
    )
    parser.add_argument(
        "--unsafe_serialization",
        action="store_true",
        help="write pytorch_model.bin (torch.save) instead of model.safetensors",
    )
    parser.add_argument(
        "--remove_checkpoint_dir",
        action="store_true",
        help="delete CHECKPOINT_DIR once the merged file is written",
    )


def run(args: argparse.Namespace) -> int:
    """Merge; a missing or wrong directory is reported on stderr with exit code 2."""

    try:
        written = merge_checkpoint(
            args.checkpoint_directory,
            args.output_path,
            safe_serialization=not args.unsafe_serialization,
            remove_checkpoint_dir=args.remove_checkpoint_dir,
        )
    except (OSError, ValueError) as exc:
        message = str(exc).removeprefix("merge_fsdp_weights: ")
        print(f"nbaccel merge-weights: {message}", file=sys.stderr)
        return 2
    print(f"nbaccel merge-weights: wrote {written}")
    if args.remove_checkpoint_dir:
        print(f"nbaccel merge-weights: removed {args.checkpoint_directory}")
    return 0
