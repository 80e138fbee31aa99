"""The registered benchmarks, by name, in the order ``python -m benchmarks all`` runs them."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from . import checkpoint, ddp_throughput, launch_latency

__all__ = ["BENCHMARKS", "Benchmark"]


@dataclass(frozen=True)
class Benchmark:
    """One benchmark.

    Attributes:
        name: the command-line name (also the JSON file and the docs section).
        summary: one line for ``--help``.
        add_arguments: adds the benchmark's own options (in its own group) to the parser.
        run: runs the benchmark with the parsed options; raises when a subject fails.
    """

    name: str
    summary: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], None]


BENCHMARKS: dict[str, Benchmark] = {
    bench.name: bench
    for bench in (
        Benchmark(
            name=ddp_throughput.NAME,
            summary=ddp_throughput.SUMMARY,
            add_arguments=ddp_throughput.add_arguments,
            run=ddp_throughput.run,
        ),
        Benchmark(
            name=checkpoint.NAME,
            summary=checkpoint.SUMMARY,
            add_arguments=checkpoint.add_arguments,
            run=checkpoint.run,
        ),
        Benchmark(
            name=launch_latency.NAME,
            summary=launch_latency.SUMMARY,
            add_arguments=launch_latency.add_arguments,
            run=launch_latency.run,
        ),
    )
}
