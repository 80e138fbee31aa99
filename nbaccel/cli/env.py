"""``nbaccel env``: what a bug report needs: versions, platform, devices, notebook, config."""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import sys

import torch
import yaml

from ..config import ConfigError, config_location, load_config_file
from ..environment import (
    choose_device,
    cuda_device_count,
    hardware_description,
    in_colab,
    in_kaggle,
    in_notebook,
    read_launch_environment,
    tpu_requested,
    xla_requested,
)
from ..version import __version__
from .parsing import config_file_option

__all__ = ["NAME", "SUMMARY", "add_arguments", "nccl_version", "package_version", "run"]

NAME = "env"
SUMMARY = "print versions, devices and the config in force (for bug reports)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``nbaccel env``."""
    config_file_option(parser, "config file to show", "the one in force")


def package_version(name: str) -> str:
    """The installed version of ``name``, or ``not installed``."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def nccl_version() -> str:
    """NCCL's version as torch was built with it (asks no GPU), or ``not available``."""
    getter = getattr(torch._C, "_nccl_version", None)
    if getter is None or not torch.backends.cuda.is_built():
        return "not available"
    try:
        code = int(getter())
    except Exception:
        return "not available"
    major, rest = divmod(code, 10000) if code >= 10000 else divmod(code, 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def run(args: argparse.Namespace) -> int:
    """Print the report (CUDA is not initialised)."""
    launch = read_launch_environment()
    choice = choose_device(launch)
    gpus = cuda_device_count()
    rows = [
        ("nbaccel", __version__),
        ("Python", platform.python_version()),
        ("Platform", platform.platform()),
        ("torch", torch.__version__),
        ("CUDA build", str(torch.version.cuda)),
        ("NCCL", nccl_version()),
        ("ipykernel", package_version("ipykernel")),
        ("ipywidgets", package_version("ipywidgets")),
        ("CUDA devices", str(gpus)),
        ("Hardware", hardware_description(gpus > 0)),
        ("TPU requested", str(tpu_requested())),
        ("XLA path requested", str(xla_requested())),
        ("Notebook", str(in_notebook())),
        ("Colab / Kaggle", f"{in_colab()} / {in_kaggle()}"),
        ("Device chosen", str(choice.device)),
        ("Launcher", launch.launcher),
        ("World size / rank", f"{launch.world_size} / {launch.rank}"),
    ]
    path, origin = config_location(args.config_file)
    rows.append(("Config file", f"{path} ({origin})" if path else f"none ({origin})"))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"- {key.ljust(width)} : {value}")
    if path is None:
        return 0
    try:
        loaded = load_config_file(path, origin, report=None)
    except ConfigError as exc:
        print(f"- config error: {exc}")
        return 1
    print("- Config in force:")
    text = yaml.safe_dump(loaded.config.to_dict(), sort_keys=False).rstrip()
    print("\n".join(f"    {line}" for line in text.splitlines()))
    if loaded.ignored:
        print(f"    # accepted but not acted on: {', '.join(loaded.ignored)}")
    sys.stdout.flush()
    return 0
