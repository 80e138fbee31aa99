"""Launched functions that leave a rank somewhere it should not be (test_where.py, and the
pool's tests). Each line a test names ends with a ``# <- name`` marker; :func:`line_of`
finds it."""

from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.distributed as dist

from nbaccel import PartialState


def line_of(marker: str) -> int:
    """The number of the line of this file that ends with ``# <- marker``."""
    for number, line in enumerate(Path(__file__).read_text().splitlines(), start=1):
        if line.rstrip().endswith(f"# <- {marker}"):
            return number
    raise LookupError(marker)


def skips_and_sleeps() -> int:
    """Rank 1 never calls the all_reduce: it sleeps for good."""
    rank = PartialState().process_index
    if rank == 1:
        time.sleep(1e6)  # <- sleeps
    dist.all_reduce(torch.ones(4))  # <- all_reduce
    return rank


def skips_and_returns() -> int:
    """Rank 1 never calls the all_reduce: it returns."""
    rank = PartialState().process_index
    if rank == 0:
        dist.all_reduce(torch.ones(4))  # <- all_reduce alone
    return rank


def late_joiner(delay: float) -> int:
    """Rank 1 joins the all_reduce ``delay`` seconds late (a stall that ends)."""
    rank = PartialState().process_index
    if rank == 1:
        time.sleep(delay)  # <- late
    dist.all_reduce(torch.ones(4))  # <- all_reduce late
    return rank


def gather_against_reduce() -> int:
    """Rank 1 calls all_gather where rank 0 calls all_reduce."""
    rank = PartialState().process_index
    tensor = torch.ones(4)
    if rank == 1:
        dist.all_gather([torch.zeros(4), torch.zeros(4)], tensor)  # <- all_gather
    else:
        dist.all_reduce(tensor)  # <- all_reduce instead
    return rank


def spins_while_the_other_waits() -> int:
    """Rank 1 spins in pure Python; rank 0 waits in a barrier."""
    rank = PartialState().process_index
    if rank == 1:
        while True:  # <- spins
            pass
    dist.barrier()  # <- barrier
    return rank


def gathers_other_shapes() -> int:
    """Rank 0 gathers 2 numbers, rank 1 (3 s later) 3: torch's gloo backend aborts a rank."""
    rank = PartialState().process_index
    if rank == 1:
        time.sleep(3)
    mine = torch.ones(2 + rank)
    dist.all_gather([torch.zeros(2 + rank), torch.zeros(2 + rank)], mine)  # <- shapes
    return rank


def gathers_other_shapes_at_once() -> int:
    """Both ranks gather at once, rank 0 two numbers and rank 1 three: gloo aborts a rank
    before any "where are you?" could reach it."""
    rank = PartialState().process_index
    mine = torch.ones(2 + rank)
    dist.all_gather([torch.zeros(2 + rank), torch.zeros(2 + rank)], mine)  # <- at once
    return rank


def queues_and_sleeps() -> int:
    """Rank 0 queues an all_reduce (``async_op=True``) and goes on sleeping; rank 1 never calls
    it (as an NCCL rank goes on after its collective was queued)."""
    rank = PartialState().process_index
    if rank == 0:
        work = dist.all_reduce(torch.ones(2), async_op=True)  # <- queued
        time.sleep(1e6)  # <- after queueing
        work.wait()
    else:
        time.sleep(1e6)  # <- never calls
    return rank
