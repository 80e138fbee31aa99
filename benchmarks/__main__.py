"""Command line: ``python -m benchmarks ddp_throughput`` or ``python -m benchmarks all``."""

from __future__ import annotations

import argparse
import sys

from .registry import BENCHMARKS


def _parser() -> argparse.ArgumentParser:
    names = "\n".join(f"  {b.name:<18} {b.summary}" for b in BENCHMARKS.values())
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Time nbaccel side by side with its peers in one run; write JSON results, "
        "a markdown table into docs/benchmarks.md and a plot into docs/img/.",
        epilog=f"benchmarks:\n{names}\n  all                every benchmark above, in turn",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("benchmark", choices=[*BENCHMARKS, "all"], help="what to run")
    parser.add_argument(
        "--no-write",
        action="store_true",
        help="print the results only; leave the JSON, docs/benchmarks.md and the plot alone",
    )
    for bench in BENCHMARKS.values():
        bench.add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the chosen benchmark(s); a peer that is missing or fails raises (non-zero exit)."""
    options = _parser().parse_args(argv)
    chosen = list(BENCHMARKS) if options.benchmark == "all" else [options.benchmark]
    for name in chosen:
        BENCHMARKS[name].run(options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
