"""``nbaccel demo``: run the quickstart notebook's training function
(``nbaccel.examples.quickstart.train``: an MLP on scikit-learn's handwritten digits) through
``notebook_launcher`` on several processes, then print what every rank returned and the test
accuracy gathered with ``gather_for_metrics``."""

from __future__ import annotations

import argparse
import sys
import time

from ..enums import PRECISIONS
from ..environment import cuda_device_count
from ..examples.quickstart import require_scikit_learn, train
from ..launch.parent.notebook import notebook_launcher

__all__ = ["NAME", "SUMMARY", "add_arguments", "run"]

NAME = "demo"
SUMMARY = "train an MLP on the handwritten digits on several processes, the notebook way"

# The accuracy the demo must reach on the digits' test split for the command to succeed.
ACCURACY_THRESHOLD = 0.9


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``nbaccel demo``."""
    parser.add_argument(
        "--num_processes",
        type=int,
        default=None,
        help="processes on this machine (default: every GPU, else 2 CPU processes)",
    )
    parser.add_argument(
        "--start_method", choices=("auto", "fork", "spawn"), default="auto", help="how to start"
    )
    parser.add_argument("--epochs", type=int, default=8, help="passes over the data (default 8)")
    parser.add_argument("--mixed_precision", choices=PRECISIONS, default=None, help="precision")
    parser.add_argument("--cpu", action="store_true", help="use the CPU even if GPUs exist")


def run(args: argparse.Namespace) -> int:
    """Launch the training function and print what each rank returned; 0 if accuracy >= 0.9."""
    try:
        require_scikit_learn()
    except ModuleNotFoundError as exc:
        print(f"nbaccel demo: {exc}", file=sys.stderr)
        return 1
    gpus = 0 if args.cpu else cuda_device_count()
    num_processes = args.num_processes or gpus or 2
    started = time.perf_counter()
    results = notebook_launcher(
        train,
        kwargs={"epochs": args.epochs},
        num_processes=num_processes,
        mixed_precision=args.mixed_precision,
        start_method=args.start_method,
        cpu=True if args.cpu or not gpus else None,
        hosts=False,  # this machine, whatever hosts the config file names
    )
    elapsed = time.perf_counter() - started
    for result in results:
        print(
            f"rank {result['rank']}/{result['world_size']} on {result['device']}: "
            f"{result['steps']} optimizer steps, last loss {result['last_loss']:.4f}, "
            f"test accuracy {result['accuracy']:.3f} on {result['evaluated']} images"
        )
    accuracy = results[0]["accuracy"]
    verdict = "PASSED" if accuracy >= ACCURACY_THRESHOLD else "FAILED"
    print(
        f"test accuracy: {accuracy:.3f} (gathered from {len(results)} ranks with "
        f"gather_for_metrics; {verdict}, threshold {ACCURACY_THRESHOLD}) in {elapsed:.1f} s"
    )
    return 0 if accuracy >= ACCURACY_THRESHOLD else 1
