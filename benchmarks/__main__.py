"""Command line: ``python -m benchmarks ddp_throughput`` or ``python -m benchmarks all``."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from . import summary
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
    parser.add_argument(
        "benchmark", nargs="+", choices=[*BENCHMARKS, "all"], help="what to run (one or more)"
    )
    parser.add_argument(
        "--no-write",
        action="store_true",
        help="print the results only; leave the JSON, docs/benchmarks.md and the plot alone",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: tiny sizes, 1 counted repetition, no spawn subjects unless asked "
        "for; implies --no-write (figures from it mean nothing)",
    )
    parser.add_argument(
        "--no-peers",
        action="store_true",
        help="run only nbaccel and the hand-written / plain-torch baselines (for CI smoke tests "
        "where the bench extra is not installed); implies --no-write",
    )
    for bench in BENCHMARKS.values():
        bench.add_arguments(parser)
    return parser


def _run_alone(name: str, args: list[str]) -> None:
    """One benchmark of several in its own interpreter, so that what a peer leaves in its
    process (Accelerate's process-wide state, torch-elastic's signal handlers) cannot reach
    the next benchmark's forked ranks. Its failure fails the run."""
    rest = [arg for arg in args if arg not in BENCHMARKS and arg != "all"]
    subprocess.run([sys.executable, "-m", "benchmarks", name, *rest], check=True)


def main(argv: list[str] | None = None) -> int:
    """Run the chosen benchmark(s); a peer that is missing or fails raises (non-zero exit)."""
    parser = _parser()
    options = parser.parse_args(argv)
    if options.quick or options.no_peers:
        options.no_write = True
    if options.quick:
        for bench in BENCHMARKS.values():
            for name, value in bench.quick.items():
                if getattr(options, name) == parser.get_default(name):
                    setattr(options, name, value)
    chosen = list(
        dict.fromkeys(list(BENCHMARKS) if "all" in options.benchmark else options.benchmark)
    )
    args = sys.argv[1:] if argv is None else argv
    timings: list[tuple[str, float]] = []
    for name in chosen:
        started = time.monotonic()
        if len(chosen) == 1:
            print(f"== {name}", flush=True)
            BENCHMARKS[name].run(options)
            print(f"== {name}: {time.monotonic() - started:.0f} s", flush=True)
        else:
            _run_alone(name, args)
        timings.append((name, time.monotonic() - started))
    if not options.no_write:
        summary.update()  # the targets-at-a-glance table, from every results file there is
    if len(timings) > 1:
        print("== took: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in timings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
