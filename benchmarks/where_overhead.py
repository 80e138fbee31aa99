"""What the watch over the ranks costs in steady state: DDP training throughput, and the time
of one small ``all_reduce``, in nbaccel launches with the watch on (the default: collectives
noted, ranks asked once a second) and off (``stall_timeout=None``, torch's own collectives)."""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from . import harness
from .ddp_throughput import Config as TrainingConfig
from .ddp_throughput import _build, _train, _with_accelerator

__all__ = ["NAME", "SUMMARY", "add_arguments", "run"]

NAME = "where_overhead"
SUMMARY = "DDP samples/s and the time of a small all_reduce, nbaccel's watch over the ranks "
SUMMARY += "on vs off (2 CPU ranks, gloo)"
SUBJECTS = {"off": "watch off (stall_timeout=None)", "on": "watch on (the default)"}
TARGET_RATIO = 0.99


@dataclass(frozen=True)
class Config:
    """What one repetition measures; both subjects get the same.

    Attributes:
        training: the model, batches and steps (``ddp_throughput``'s).
        calls: timed ``all_reduce`` calls of one float, after as many untimed ones.
        reps: counted repetitions per subject (after one uncounted warm-up repetition).
    """

    training: TrainingConfig
    calls: int = 2000
    reps: int = 5


def _rank(subject: str, config: Config) -> dict[str, Any]:
    """One rank of one repetition, inside ``notebook_launcher``: train, then time small
    all_reduces; rank 0's figures come back."""
    import torch
    import torch.distributed as dist

    if subject == "off":  # the baseline: torch's own functions (imported here: in the rank)
        from nbaccel.launch.worker.collectives import untrack_collectives

        untrack_collectives()
    training = config.training
    torch.set_num_threads(training.threads)
    model, optimizer, data = _build(training)
    prepared = _with_accelerator("nbaccel")(model, optimizer, data, training)
    torch.set_num_threads(training.threads)
    batches = iter(prepared.loader)
    _train(prepared, batches, training.warmup_steps)
    dist.barrier()
    start = time.perf_counter()
    _train(prepared, batches, training.steps)
    dist.barrier()
    seconds = time.perf_counter() - start
    one = torch.ones(1)
    for _ in range(config.calls):
        dist.all_reduce(one)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(config.calls):
        dist.all_reduce(one)
    dist.barrier()
    call_us = 1e6 * (time.perf_counter() - start) / config.calls
    inner = getattr(prepared.model, "module", prepared.model)
    checksum = sum(float(p.detach().double().sum()) for p in inner.parameters())
    samples = training.steps * training.batch_size * training.world_size
    return {"seconds": seconds, "samples": samples, "call_us": call_us, "checksum": checksum}


def _repetition(subject: str, config: Config) -> dict[str, Any]:
    from nbaccel import notebook_launcher  # the subject under test, loaded when it runs

    stall = None if subject == "off" else 300.0
    results = notebook_launcher(
        _rank,
        (subject, config),
        num_processes=config.training.world_size,
        cpu=True,
        start_method="fork",
        stall_timeout=stall,
    )
    result = dict(results[0])
    result["samples_per_s"] = result["samples"] / result["seconds"]
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    group = parser.add_argument_group(NAME)
    group.add_argument("--where_reps", type=int, default=None, help="counted repetitions (5)")
    group.add_argument("--where_steps", type=int, default=None, help="timed steps (300)")
    group.add_argument("--where_calls", type=int, default=None, help="timed all_reduces (2000)")


def _config(options: argparse.Namespace) -> Config:
    world = 2
    training = replace(
        TrainingConfig(),
        world_size=world,
        threads=harness.threads_per_process(world),
        steps=harness.resolve(options, "where_steps", 300, 20),
        warmup_steps=2 if getattr(options, "quick", False) else 20,
    )
    return Config(
        training=training,
        calls=harness.resolve(options, "where_calls", 2000, 100),
        reps=harness.resolve(options, "where_reps", 5, 1),
    )


def _summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    off, on = runs["off"], runs["on"]
    rate = {s: harness.summarise([r["samples_per_s"] for r in runs[s]]) for s in runs}
    call = {s: harness.summarise([r["call_us"] for r in runs[s]]) for s in runs}
    paired = [b["samples_per_s"] / a["samples_per_s"] for a, b in zip(off, on, strict=True)]
    return {
        "samples_per_s": rate,
        "all_reduce_us": call,
        "ratio_on_to_off": rate["on"]["median"] / rate["off"]["median"],
        "paired_ratio_on_to_off": harness.summarise(paired),
        "all_reduce_extra_us": call["on"]["median"] - call["off"]["median"],
    }


def _text(payload: dict[str, Any]) -> str:
    summary, config = payload["summary"], payload["config"]
    training = config["training"]
    rows = [
        "| Subject | samples/s (median) | min - max | one all_reduce, µs (median) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for subject, label in SUBJECTS.items():
        rate, call = summary["samples_per_s"][subject], summary["all_reduce_us"][subject]
        rows.append(
            f"| {label} | {rate['median']:,.0f} | {rate['min']:,.0f} - {rate['max']:,.0f} | "
            f"{call['median']:.1f} |"
        )
    ratio = summary["ratio_on_to_off"]
    verdict = "meets" if ratio >= TARGET_RATIO else "MISSES"
    return "\n".join(
        [
            "## The watch over the ranks (`where_overhead`)",
            "",
            f"nbaccel's DDP training step (`ddp_throughput`'s model, {training['batch_size']} "
            f"samples per rank per step, {training['steps']} timed steps) on "
            f"{training['world_size']} CPU ranks started by `notebook_launcher` (fork), with the "
            "watch over the ranks on (the default: every `torch.distributed` collective noted, "
            "each rank asked where it is once a second) and off (`stall_timeout=None`, torch's "
            f"own collectives); then {config['calls']} `all_reduce` calls of one float, timed. "
            f"{config['reps']} repetitions per subject, alternating, after one uncounted "
            "warm-up each.",
            "",
            *rows,
            "",
            f"Throughput with the watch on / off: **{ratio:.3f}x** (per-round ratio "
            f"{summary['paired_ratio_on_to_off']['median']:.3f}x; target >= {TARGET_RATIO}x: "
            f"{verdict}); one small all_reduce costs "
            f"{summary['all_reduce_extra_us']:+.1f} µs more with the watch on (DDP's own "
            "gradient all-reduces run in C++ and are not wrapped).",
            *harness.markdown_footer(NAME, payload["machine"], "repetition"),
        ]
    )


def _plot(payload: dict[str, Any]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = payload["summary"]["samples_per_s"]
    fig, ax = plt.subplots(figsize=(6.0, 3.6), dpi=120)
    labels = [SUBJECTS[s] for s in SUBJECTS]
    ax.bar(labels, [rates[s]["median"] for s in SUBJECTS], color=["#7f7f7f", "#1f77b4"])
    for i, subject in enumerate(SUBJECTS):
        ax.scatter([i] * len(rates[subject]["values"]), rates[subject]["values"], color="black")
    ax.set_ylabel("samples/s (median; dots: repetitions)")
    ax.set_title("DDP throughput, 2 CPU ranks: the watch over the ranks on vs off", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return fig


def run(options: argparse.Namespace) -> None:
    """Measure both subjects alternately, print the table, and (unless ``--no-write``) write
    the JSON, the docs section and the plot."""
    started = time.monotonic()
    versions = harness.require_subjects(options, ("torch", "nbaccel"), ("matplotlib",))
    config = _config(options)
    print(f"{NAME}: 2 subjects x ({config.reps} + 1 warm-up) reps", flush=True)
    machine = harness.machine_description(versions)
    runs: dict[str, list[dict[str, Any]]] = {subject: [] for subject in SUBJECTS}
    for rep in range(config.reps + 1):
        for subject in SUBJECTS:
            result = _repetition(subject, config)
            label = "warm-up" if rep == 0 else f"rep {rep}/{config.reps}"
            print(
                f"  {label:<10} {SUBJECTS[subject]:<32} {result['samples_per_s']:9.0f} samples/s"
                f"  {result['call_us']:7.1f} µs per all_reduce",
                flush=True,
            )
            if rep > 0:
                runs[subject].append(result)
    sums = {r["checksum"] for rs in runs.values() for r in rs}
    if max(sums) - min(sums) > 1e-6 * max(1.0, abs(statistics.median(sums))):
        raise RuntimeError(f"the subjects did not train alike: parameter sums {sorted(sums)}")
    payload: dict[str, Any] = {
        "benchmark": NAME,
        "machine": harness.finish_machine(machine, started),
        "config": asdict(config),
        "summary": _summary(runs),
        "runs": runs,
    }
    harness.publish(options, NAME, payload, _text(payload), _plot)
    print(f"watch on / off = {payload['summary']['ratio_on_to_off']:.3f}x", flush=True)
