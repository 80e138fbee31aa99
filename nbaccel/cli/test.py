"""``nbaccel test``: launch the shipped sanity script the configured way and report pass/fail.

Set ``NBACCEL_TEST_FAIL_RANK=N`` to make rank N fail on purpose (to see the failure path).
The sanity script checks data-parallel training: a DEEPSPEED config runs it without DeepSpeed
(the processes, collectives and DDP steps of the same launch), and says so.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from ..config import ConfigError, DeepSpeedConfig, ResolvedLaunch, config_in_force, resolve_launch
from ..testing import sanity
from .launch import execute
from .parsing import config_file_option

__all__ = ["NAME", "SUMMARY", "add_arguments", "run"]

NAME = "test"
SUMMARY = "check the configured launch with a short sanity run"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``nbaccel test``."""
    config_file_option(parser, "config file", "the one in force")


def run(args: argparse.Namespace) -> int:
    """Launch the sanity script; print a summary; 0 on success, 1 on failure."""
    try:
        loaded = config_in_force(args.config_file, report=None)
        resolved = resolve_launch({}, loaded)
    except ConfigError as exc:
        print(f"nbaccel test: {exc}", file=sys.stderr)
        return 2  # a bad config file is a usage error
    resolved = _without_deepspeed(resolved)
    where = str(resolved.path) if resolved.path else "no config file (defaults)"
    print(f"nbaccel test: running the sanity script with {where}", flush=True)
    code = execute(resolved, [str(Path(sanity.__file__))])
    summary = (
        f"{resolved.world_size} process(es) on {resolved.config.num_machines} machine(s), "
        f"{resolved.config.distributed_type}, mixed_precision={resolved.config.mixed_precision}"
    )
    if code == 0:
        print(f"nbaccel test: PASSED ({summary})", flush=True)
        return 0
    print(f"nbaccel test: FAILED (exit code {code}; {summary}); see the output above", flush=True)
    return 1


def _without_deepspeed(resolved: ResolvedLaunch) -> ResolvedLaunch:
    """A DEEPSPEED launch as a data-parallel one: the sanity script's steps compare DDP's
    weights with one process's, which DeepSpeed's engine does not give."""
    cfg = resolved.config
    if cfg.distributed_type != "DEEPSPEED":
        return resolved
    kind = "NO" if resolved.world_size == 1 else ("MULTI_CPU" if resolved.cpu else "MULTI_GPU")
    print(
        "nbaccel test: the sanity script checks data-parallel training, so it runs without "
        f"DeepSpeed ({kind}); to check DeepSpeed, run your script with `nbaccel launch`.",
        flush=True,
    )
    plain = cfg.replace(distributed_type=kind, deepspeed_config=DeepSpeedConfig())
    return dataclasses.replace(resolved, config=plain)
