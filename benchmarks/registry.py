"""The registered benchmarks, by name, in the order ``python -m benchmarks all`` runs them."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import (
    checkpoint,
    collectives,
    ddp_throughput,
    deepspeed,
    fsdp_memory,
    gpt_bf16,
    launch_latency,
    multihost,
    pool,
    scaling,
    where_overhead,
)

__all__ = ["BENCHMARKS", "Benchmark"]


@dataclass(frozen=True)
class Benchmark:
    """One benchmark.

    Attributes:
        name: the command-line name (also the JSON file and the docs section).
        summary: one line for ``--help``.
        add_arguments: adds the benchmark's own options (in its own group) to the parser.
        run: runs the benchmark with the parsed options; raises when a subject fails.
        quick: option values that ``--quick`` puts in place of the defaults (for a benchmark
            whose options have fixed defaults; the others read ``options.quick`` themselves).
    """

    name: str
    summary: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], None]
    quick: dict[str, Any] = field(default_factory=dict)


def _module(module: Any, **quick: Any) -> Benchmark:
    return Benchmark(module.NAME, module.SUMMARY, module.add_arguments, module.run, quick)


BENCHMARKS: dict[str, Benchmark] = {
    bench.name: bench
    for bench in (
        _module(ddp_throughput, reps=1, steps=20, warmup_steps=2),
        _module(checkpoint, checkpoint_params=2_000_000, checkpoint_repeats=1),
        _module(launch_latency),
        _module(collectives),
        _module(scaling),
        _module(fsdp_memory),
        _module(deepspeed),
        _module(gpt_bf16),
        _module(pool),
        _module(where_overhead),
        _module(multihost),
    )
}
