"""Launch latency: seconds from the launcher call to the returned result, for a function that
prints one line, joins the process group and does one all-reduce, on 2 and 4 CPU processes; in
a script and inside a real Jupyter kernel. Inside the kernel it also measures the time to the
first output line: from the moment the cell calls the launcher until the client receives a
rank's first printed line on iopub (how soon a notebook user sees the run alive).

Subjects (``benchmarks/launch_subjects.py``): nbaccel's notebook_launcher with fork and with
spawn, Accelerate's notebook_launcher, Lightning Fabric's ``ddp_notebook``, and
``torch.multiprocessing.start_processes`` with fork and with spawn. Each subject keeps one
host for the whole run (a ``python -m benchmarks.runner`` process for the script variant, a
kernel for the other), as a user keeps one kernel. Per process count: one uncounted warm-up
launch per subject, then the counted launches, subjects alternating (a b c ... a b c ...).
A peer that is missing or fails makes the run fail.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from . import harness
from .hosts import Host, HostError, KernelHost, ScriptHost, host_environment
from .launch_subjects import ALIVE, BASELINE, SUBJECTS, Subject

__all__ = ["NAME", "SUMMARY", "add_arguments", "run"]

NAME = "launch_latency"
SUMMARY = "seconds from the launcher call to the result (join + one all-reduce), 2 and 4 CPU "
SUMMARY += "ranks, in a script and in a Jupyter kernel; time to the first output line"
VARIANTS = ("script", "kernel")
# (subject, compared with, at most this ratio of its median)
TARGETS = (
    ("nbaccel fork", "Accelerate notebook_launcher", 0.5),
    ("nbaccel fork", "Lightning Fabric ddp_notebook", 1.0),
    ("nbaccel spawn", "torch start_processes spawn", 1.15),
)
_TIMED_CELL = """
_bench_t0 = time.time()
_bench_p0 = time.perf_counter()
launch({world})
_bench_dt = time.perf_counter() - _bench_p0
"""


# -- options -----------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    group = parser.add_argument_group(NAME)
    group.add_argument("--latency_reps", type=int, default=None, help="counted launches (5)")
    group.add_argument("--latency_worlds", default=None, help="process counts (default 2,4)")
    group.add_argument("--latency_variants", default=None, help="script,kernel (default both)")
    group.add_argument(
        "--latency_subjects",
        default=None,
        help="comma-separated subject labels (default all: " + ", ".join(SUBJECTS) + ")",
    )
    group.add_argument(
        "--latency_timeout", type=float, default=300.0, help="seconds one launch may take"
    )


def _subjects(options: argparse.Namespace) -> list[Subject]:
    chosen = harness.resolve(options, "latency_subjects", ",".join(SUBJECTS), None)
    if chosen is None:  # --quick: the fork subjects only (spawn takes seconds per launch)
        chosen = ",".join(label for label in SUBJECTS if "spawn" not in label)
    labels = [label.strip() for label in chosen.split(",") if label.strip()]
    unknown = [label for label in labels if label not in SUBJECTS]
    if unknown or BASELINE not in labels:
        raise SystemExit(
            f"--latency_subjects: {unknown or labels} - choose among {', '.join(SUBJECTS)}; "
            f"{BASELINE!r} (the baseline of the ratios) must be one of them."
        )
    if getattr(options, "no_peers", False):
        labels = [label for label in labels if SUBJECTS[label].peer is None]
    return [SUBJECTS[label] for label in labels]


# -- measuring ---------------------------------------------------------------------------------
def _start_hosts(variant: str, subjects: list[Subject]) -> dict[str, Host]:
    env = host_environment(OMP_NUM_THREADS="1")
    hosts: dict[str, Host] = {}
    try:
        for subject in subjects:
            name = f"{subject.label} ({variant})"
            hosts[subject.label] = (
                ScriptHost(name, env) if variant == "script" else KernelHost(name, env)
            )
        for subject in subjects:  # the hosts import their launchers side by side
            hosts[subject.label].submit(subject.cell + "\nimport time\n")
        for subject in subjects:
            hosts[subject.label].wait(timeout=300)
    except BaseException:
        for host in hosts.values():
            host.close()
        raise
    return hosts


def _launch_once(host: Host, world: int, timeout: float) -> dict[str, float]:
    result = host.run(_TIMED_CELL.format(world=world), "(_bench_t0, _bench_dt)", timeout)
    started, seconds = result.value
    timing = {"launch": float(seconds)}
    if not isinstance(host, KernelHost):  # a script host's output goes to its log file
        return timing
    first: dict[int, float] = {}
    for arrived, _stream, text in result.lines:
        for match in ALIVE.finditer(text):
            first.setdefault(int(match.group(1)), arrived - started)
    if sorted(first) != list(range(world)):
        raise HostError(
            f"{host.name}: the first lines of ranks {sorted(set(range(world)) - set(first))} "
            f"never reached the client at {world} processes."
        )
    timing["first_line"] = min(first.values())
    timing["all_ranks_alive"] = max(first.values())
    return timing


def _measure_variant(
    variant: str, subjects: list[Subject], worlds: list[int], reps: int, timeout: float
) -> dict[str, Any]:
    hosts = _start_hosts(variant, subjects)
    results: dict[str, Any] = {}
    try:
        for world in worlds:
            runs: dict[str, list[dict[str, float]]] = {s.label: [] for s in subjects}
            warmup = {s.label: _launch_once(hosts[s.label], world, timeout) for s in subjects}
            for rep in range(reps):
                for subject in subjects:
                    timing = _launch_once(hosts[subject.label], world, timeout)
                    runs[subject.label].append(timing)
                    extra = (
                        f"  first line {timing['first_line']:.3f} s"
                        if "first_line" in timing
                        else ""
                    )
                    print(
                        f"  {variant} {world} procs rep {rep + 1}/{reps}: {subject.label:<30} "
                        f"{timing['launch']:7.3f} s{extra}",
                        flush=True,
                    )
            results[str(world)] = {
                label: {
                    "warmup": warmup[label],
                    **{key: harness.summarise([t[key] for t in timings]) for key in timings[0]},
                }
                for label, timings in runs.items()
            }
    finally:
        for host in hosts.values():
            host.close()
    return results


# -- verdicts, table, plot ---------------------------------------------------------------------
def _verdicts(results: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for variant, by_world in results.items():
        for world, subjects in by_world.items():
            for subject, other, limit in TARGETS:
                if subject in subjects and other in subjects:
                    ratio = (
                        subjects[subject]["launch"]["median"] / subjects[other]["launch"]["median"]
                    )
                    found.append(
                        {
                            "variant": variant,
                            "processes": int(world),
                            "subject": subject,
                            "versus": other,
                            "ratio": ratio,
                            "at_most": limit,
                            "met": ratio <= limit,
                        }
                    )
    return found


def _stat(stats: dict[str, Any]) -> str:
    return f"{stats['median']:.3f} ({stats['min']:.3f} - {stats['max']:.3f})"


def _table(by_world: dict[str, Any], key: str) -> list[str]:
    worlds = list(by_world)
    head = "| Subject | " + " | ".join(
        f"{w} processes: median (min - max) s | vs nbaccel fork" for w in worlds
    )
    rows = [head + " |", "| --- |" + " ---: | ---: |" * len(worlds)]
    for label in by_world[worlds[0]]:
        cells = []
        for world in worlds:
            stats = by_world[world][label][key]
            base = by_world[world][BASELINE][key]["median"]
            cells.append(f"{_stat(stats)} | {stats['median'] / base:.2f}x")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return rows


def _markdown(payload: dict[str, Any]) -> str:
    config, results = payload["config"], payload["results"]
    lines = [
        "## Launch latency (`launch_latency`)",
        "",
        "Seconds from the launcher call to the returned result, for a function that prints one",
        "line, joins the process group (gloo) and does one all-reduce of a one-element tensor,",
        "on CPU processes. Subjects: nbaccel's `notebook_launcher` with fork and with spawn (the",
        "function is defined in `__main__`, so spawn ships it by value), Accelerate's",
        "`notebook_launcher` (`PartialState(cpu=True)` inside the function, so it really runs the",
        "processes), Lightning Fabric's `ddp_notebook` strategy and",
        "`torch.multiprocessing.start_processes` with fork and with spawn (spawn pickles by",
        "reference, so both torch subjects import their function from a module). Each subject",
        "keeps one host for the run: a plain Python process (*script*) or a real Jupyter kernel",
        "(*kernel*, driven with `jupyter_client`; the time is taken inside the kernel). Per",
        f"process count: one uncounted warm-up launch, then {config['reps']} counted launches per",
        "subject, subjects alternating. Cells: median (min - max) seconds; ratio = median /",
        "median of nbaccel fork.",
        "",
    ]
    for variant, by_world in results.items():
        lines += [f"### In a {'script' if variant == 'script' else 'Jupyter kernel'}", ""]
        lines += [*_table(by_world, "launch"), ""]
    if "kernel" in results:
        lines += [
            "### Time to the first output line (in a Jupyter kernel)",
            "",
            "Seconds from the cell calling the launcher until the client receives a rank's first",
            "printed line on iopub (the kernel's clock at the call, the client's at arrival; one",
            "machine). The line is the function's first statement; Fabric calls the function",
            "after the process group is joined, the others before (the function joins it).",
            "nbaccel's lines reach the kernel through its relay (a pipe per rank, whole lines",
            "with a rank prefix); the other fork launchers' children write to the kernel's",
            "stream objects they inherited, and spawned ones to the kernel's standard output.",
            "",
            *_table(results["kernel"], "first_line"),
            "",
        ]
    lines += ["### Targets", ""]
    for v in payload["verdicts"]:
        lines.append(
            f"- {v['variant']}, {v['processes']} processes: {v['subject']} / {v['versus']} = "
            f"**{v['ratio']:.2f}x** (target at most {v['at_most']}x): "
            f"{'met' if v['met'] else 'NOT met'}"
        )
    lines += harness.markdown_footer(NAME, payload["machine"], "launch")
    return "\n".join(lines)


def _plot(payload: dict[str, Any]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = payload["results"]
    panels = [(v, "launch", f"launch to result, {v}") for v in results]
    if "kernel" in results:
        panels.append(("kernel", "first_line", "launch to first output line, kernel"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.6), dpi=110)
    axes = [axes] if len(panels) == 1 else list(axes)
    for ax, (variant, key, title) in zip(axes, panels, strict=True):
        by_world = results[variant]
        labels = list(by_world[next(iter(by_world))])
        width = 0.8 / len(by_world)
        for i, (world, subjects) in enumerate(by_world.items()):
            stats = [subjects[label][key] for label in labels]
            xs = [j + (i - (len(by_world) - 1) / 2) * width for j in range(len(labels))]
            medians = [s["median"] for s in stats]
            err = [
                [m - s["min"] for m, s in zip(medians, stats, strict=True)],
                [s["max"] - m for m, s in zip(medians, stats, strict=True)],
            ]
            ax.bar(xs, medians, width, yerr=err, capsize=3, label=f"{world} processes")
        ax.set_yscale("log")
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels([SUBJECTS[label].short for label in labels], fontsize=8)
        ax.set_ylabel("seconds (median; bars min-max; log scale)")
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    machine = payload["machine"]
    fig.suptitle(
        f"Launch latency, CPU gloo; {machine['cpu_model']}, {machine['usable_cores']} cores",
        fontsize=10,
    )
    return fig


# -- the benchmark -----------------------------------------------------------------------------
def run(options: argparse.Namespace) -> None:
    """Time every subject alternately; print, and (unless --no-write) record the results."""
    started = time.monotonic()
    subjects = _subjects(options)
    peers = tuple(sorted({s.peer for s in subjects if s.peer}))
    versions = harness.require_subjects(
        options, ("torch", "nbaccel", "jupyter_client", "ipykernel"), (*peers, "matplotlib")
    )
    reps = harness.resolve(options, "latency_reps", 5, 1)
    worlds = [
        int(w) for w in str(harness.resolve(options, "latency_worlds", "2,4", "2")).split(",")
    ]
    variants = str(harness.resolve(options, "latency_variants", "script,kernel", "script,kernel"))
    chosen = [v.strip() for v in variants.split(",") if v.strip()]
    if reps < 1 or not worlds or min(worlds) < 2 or not set(chosen) <= set(VARIANTS) or not chosen:
        raise SystemExit(
            "launch_latency: --latency_reps >= 1, --latency_worlds >= 2 each, "
            f"--latency_variants from {VARIANTS}."
        )
    print(
        f"{NAME}: {len(subjects)} subjects x (1 warm-up + {reps}) launches at {worlds} "
        f"processes, variants {chosen}",
        flush=True,
    )
    machine = harness.machine_description(versions)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    results = {
        variant: _measure_variant(variant, subjects, worlds, reps, options.latency_timeout)
        for variant in chosen
    }
    payload: dict[str, Any] = {
        "benchmark": NAME,
        "machine": harness.finish_machine(machine, started),
        "config": {
            "reps": reps,
            "worlds": worlds,
            "variants": chosen,
            "subjects": [s.label for s in subjects],
            "threads_per_process": 1,
        },
        "results": results,
    }
    payload["verdicts"] = _verdicts(results)
    text = _markdown(payload)
    harness.publish(options, NAME, payload, text, _plot)
