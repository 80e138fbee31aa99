"""``nbaccel env``: what nbaccel sees on this machine, for bug reports."""

from __future__ import annotations

import argparse
import platform

import torch

from .. import __version__
from ..environment import (
    choose_device,
    cuda_device_count,
    in_colab,
    in_kaggle,
    read_launch_environment,
    tpu_requested,
)

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register the subcommand."""
    parser = subparsers.add_parser("env", help="print the environment nbaccel sees")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print versions, hardware and launch variables (without initialising CUDA)."""
    launch = read_launch_environment()
    choice = choose_device(launch)
    rows = [
        ("nbaccel", __version__),
        ("Python", platform.python_version()),
        ("Platform", platform.platform()),
        ("torch", torch.__version__),
        ("CUDA build", str(torch.version.cuda)),
        ("CUDA devices", str(cuda_device_count())),
        ("TPU requested", str(tpu_requested())),
        ("Colab / Kaggle", f"{in_colab()} / {in_kaggle()}"),
        ("Device chosen", str(choice.device)),
        ("Launcher", launch.launcher),
        ("World size / rank", f"{launch.world_size} / {launch.rank}"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"- {key.ljust(width)} : {value}")
    return 0
