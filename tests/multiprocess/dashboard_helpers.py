"""Functions that the dashboard tests launch in real workers."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

from nbaccel import PartialState
from nbaccel.launch.events import report_metrics, report_progress

STEPS = 5


def train_with_progress() -> int:
    """Print, report progress and metrics, and draw a tqdm bar on the main process."""
    state = PartialState()
    rank = state.process_index
    print(f"hello from rank {rank}", flush=True)
    bar = tqdm(range(STEPS), desc="train", disable=not state.is_main_process, file=sys.stderr)
    for step in bar:
        time.sleep(0.05)
        report_progress(step + 1, STEPS, desc="train")
        report_metrics({"loss": 1.0 / (step + 1)}, step=step)
    print(f"rank {rank} done", flush=True)
    return rank


def fail_on_rank_one() -> int:
    """Rank 1 exits with code 3; rank 0 waits to be stopped."""
    rank = PartialState().process_index
    if rank == 1:
        sys.stdout.flush()
        import os

        os._exit(3)
    time.sleep(30)
    return rank


def sleep_long() -> int:
    """Run until stopped."""
    print("sleeping", flush=True)
    time.sleep(40)
    return 0
