"""``nbaccel demo``: a real training run through ``notebook_launcher`` (2 CPU processes)."""

from __future__ import annotations

import argparse
import time

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register the subcommand."""
    parser = subparsers.add_parser(
        "demo", help="train a small classifier on several processes, launched the notebook way"
    )
    parser.add_argument("--num_processes", type=int, default=2, help="processes (default 2)")
    parser.add_argument(
        "--start_method", choices=("auto", "fork", "spawn"), default="auto", help="how to start"
    )
    parser.add_argument("--epochs", type=int, default=3, help="passes over the data")
    parser.add_argument("--cpu", action="store_true", help="use the CPU even if GPUs exist")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Launch the training function and print what each rank returned."""
    from ..launch.notebook import notebook_launcher
    from ..testing.training import train_classifier

    started = time.perf_counter()
    results = notebook_launcher(
        train_classifier,
        (args.epochs,),
        num_processes=args.num_processes,
        start_method=args.start_method,
        cpu=True if args.cpu else None,
    )
    elapsed = time.perf_counter() - started
    for result in results:
        print(
            f"rank {result['rank']}/{result['world_size']}: {result['steps']} steps, "
            f"last loss {result['last_loss']:.4f}"
        )
    print(f"test accuracy: {results[0]['accuracy']:.3f}  ({elapsed:.1f} s)")
    return 0 if results[0]["accuracy"] >= 0.9 else 1
