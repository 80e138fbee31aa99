"""Worker pool: time to a ready 2-process pool, and the warm round trip of a trivial cell, for
nbaccel's ``WorkerPool`` / ``%%nbaccel``, ``nbdistributed`` (``%dist_init``, ``%%distributed``)
and ``ipyparallel`` (``%px`` on 2 engines), against a cold ``notebook_launcher`` of nbaccel and
of Accelerate, all in real Jupyter kernels.

The starts and cells are timed by the client: from sending the cell to the kernel's reply
(what a notebook user waits), so a plain kernel cell (``1``) is measured too as the floor that
no cell can go below. The calls themselves (``pool.run(lambda: 1)``, ipyparallel's
``apply_sync``, a cold ``launch(2)``) are also timed inside the kernel, around the call only:
what the call costs without the kernel's messaging. Each subject has its own kernel for the
run. Starts: one uncounted warm-up start and stop, then the counted ones, subjects
alternating; then each pool is started once more and its trivial cells are timed alternately
(one uncounted warm-up round), then its calls inside the kernel; then the cold launches,
alternating, by the client and inside the kernel.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

from . import harness
from .hosts import HostError, KernelHost, host_environment
from .pool_subjects import KERNEL_FLOOR, LAUNCHES, POOLS, PoolSubject

__all__ = ["NAME", "SUMMARY", "add_arguments", "run"]

NAME = "pool"
SUMMARY = "time to a ready 2-process pool and a warm cell's round trip: nbaccel's pool vs "
SUMMARY += "nbdistributed, ipyparallel and cold notebook_launcher calls, in Jupyter kernels"
ACCELERATE = "Accelerate notebook_launcher"
INSIDE = " (inside the kernel)"
IPP_CALL = "ipyparallel view.apply_sync(lambda: 1)"
# (phase, nbaccel's round trip, phase, compared with, at most this ratio; "best peer pool":
# the faster of nbdistributed's and ipyparallel's round trips). The cells' round trips carry
# the kernel's own messaging (the plain kernel cell); the calls timed inside the kernel do not.
TARGETS = (
    ("calls", "nbaccel pool.run(lambda: 1)", "calls", ACCELERATE + INSIDE, 0.05),
    ("calls", "nbaccel pool.run(lambda: 1)", "calls", IPP_CALL, 0.5),
    ("round_trip", "nbaccel pool.run(lambda: 1)", "launch", ACCELERATE, 0.05),
    ("round_trip", "nbaccel %%nbaccel cell", "launch", ACCELERATE, 0.05),
    ("round_trip", "nbaccel pool.run(lambda: 1)", "round_trip", "best peer pool", 0.5),
    ("round_trip", "nbaccel %%nbaccel cell", "round_trip", "best peer pool", 0.5),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    group = parser.add_argument_group(NAME)
    group.add_argument("--pool_starts", type=int, default=None, help="counted starts (5)")
    group.add_argument("--pool_trips", type=int, default=None, help="counted round trips (30)")
    group.add_argument("--pool_launches", type=int, default=None, help="cold launches (5)")
    group.add_argument("--pool_timeout", type=float, default=300.0, help="seconds a cell may take")


def _timed(host: KernelHost, code: str, timeout: float) -> float:
    began = time.perf_counter()
    host.run(code, timeout=timeout)
    return time.perf_counter() - began


def _inside(host: KernelHost, statement: str, timeout: float) -> float:
    """Seconds that ``statement`` takes, timed by the kernel around the statement only."""
    code = f"_began = time.perf_counter()\n{statement}\n_took = time.perf_counter() - _began"
    return float(host.run(code, "_took", timeout=timeout).value)


def _alternate(
    labels: list[str], cell: Callable[[str], float], reps: int, what: str
) -> dict[str, list[float]]:
    """One uncounted round, then ``reps`` rounds of ``cell(label)`` per label, alternating."""
    for label in labels:
        cell(label)
    runs: dict[str, list[float]] = {label: [] for label in labels}
    for rep in range(reps):
        for label in labels:
            runs[label].append(cell(label))
        line = ", ".join(f"{label} {runs[label][-1] * 1000:.1f} ms" for label in labels)
        print(f"  {what} {rep + 1}/{reps}: {line}", flush=True)
    return runs


def _measure(
    pools: list[PoolSubject], launches: list[str], reps: dict[str, int], timeout: float
) -> dict[str, dict[str, list[float]]]:
    env = host_environment(OMP_NUM_THREADS="1")
    hosts: dict[str, KernelHost] = {}
    try:
        for label in [s.label for s in pools] + launches:
            hosts[label] = KernelHost(f"{label} (kernel)", env)
        for subject in pools:
            hosts[subject.label].run(subject.setup + "\nimport time\n", timeout=timeout)
        for label in launches:
            hosts[label].run(LAUNCHES[label].cell + "\nimport time\n", timeout=timeout)
        by = {s.label: s for s in pools}

        def start_stop(label: str) -> float:
            seconds = _timed(hosts[label], by[label].start, timeout)
            hosts[label].run(by[label].stop, timeout=timeout)
            return seconds

        starts = _alternate(list(by), start_stop, reps["starts"], "start")
        for subject in pools:
            hosts[subject.label].run(subject.start, timeout=timeout)
        cells = {KERNEL_FLOOR: (hosts[pools[0].label], "1")}
        for subject in pools:
            cells.update({k: (hosts[subject.label], v) for k, v in subject.trips.items()})
        trips = _alternate(
            list(cells), lambda k: _timed(*cells[k], timeout), reps["trips"], "round trip"
        )
        calls = {k: (hosts[s.label], v) for s in pools for k, v in s.calls.items()}
        inside = _alternate(
            list(calls), lambda k: _inside(*calls[k], timeout), reps["trips"], "call"
        )
        for subject in pools:
            hosts[subject.label].run(subject.stop, timeout=timeout)
        cold = _alternate(
            launches, lambda k: _timed(hosts[k], "launch(2)", timeout), reps["launches"], "launch"
        )
        inside |= {
            k + INSIDE: v
            for k, v in _alternate(
                launches,
                lambda k: _inside(hosts[k], "launch(2)", timeout),
                reps["launches"],
                "launch inside",
            ).items()
        }
    finally:
        for host in hosts.values():
            host.close()
    return {"start": starts, "round_trip": trips, "calls": inside, "launch": cold}


def _verdicts(stats: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    medians = {
        (group, label): s["median"] for group, by in stats.items() for label, s in by.items()
    }
    peers = [
        m
        for (g, label), m in medians.items()
        if g == "round_trip" and label.startswith(("nbdistributed", "ipyparallel"))
    ]
    if peers:
        medians["round_trip", "best peer pool"] = min(peers)
    found = []
    floor = medians.get(("round_trip", KERNEL_FLOOR))
    launch = medians.get(("launch", ACCELERATE))
    for label in ("nbaccel %%nbaccel cell", "nbaccel pool.run(lambda: 1)"):
        cell = medians.get(("round_trip", label))
        if floor is not None and launch is not None and cell is not None:
            # what the pool adds to a cell, against what the launch adds to one
            ratio = max(cell - floor, 0.0) / (launch - floor)
            found.append(
                {"subject": f"{label} (by the client, above the plain kernel cell)"}
                | {"versus": f"{ACCELERATE} (above the plain kernel cell)", "ratio": ratio}
                | {"at_most": 0.05, "met": ratio <= 0.05}
            )
    for group, subject, other_group, other, limit in TARGETS:
        if (group, subject) in medians and (other_group, other) in medians:
            ratio = medians[group, subject] / medians[other_group, other]
            where = "inside the kernel" if group == "calls" else "by the client"
            found.append(
                {"subject": f"{subject} ({where})", "versus": other, "ratio": ratio}
                | {"at_most": limit, "met": ratio <= limit}
            )
    return found


def _rows(group: dict[str, Any], unit: float, name: str) -> list[str]:
    rows = [f"| Subject | median ({name}) | min - max |", "| --- | ---: | ---: |"]
    for label, s in group.items():
        rows.append(
            f"| {label} | {s['median'] * unit:.1f} | "
            f"{s['min'] * unit:.1f} - {s['max'] * unit:.1f} |"
        )
    return rows


def _markdown(payload: dict[str, Any]) -> str:
    stats, config = payload["stats"], payload["config"]
    lines = [
        "## Worker pool (`pool`)",
        "",
        "Client-side times in real Jupyter kernels (from sending the cell to the kernel's reply),",
        "2 CPU processes, one kernel per subject. Starts: time to a ready pool",
        "(`%nbaccel start -n 2 --cpu`, `%dist_init -n 2`, `ipp.Cluster(n=2)` started and",
        f"connected), {config['starts']} counted starts each after a warm-up. Round trips of a",
        f"trivial cell on the warm pool, {config['trips']} counted each; the plain kernel cell",
        "is the floor under them all. Cold launches: `launch(2)` of `launch_latency`'s cells",
        f"(join the group, one all-reduce), {config['launches']} counted each. Subjects",
        "alternate in every phase. The calls themselves are also timed inside the kernel,",
        "around the call only (no kernel messaging): the pool's own round trip. A cell",
        "measured by the client cannot cost less than the plain kernel cell, so each cell is",
        "also compared by what it adds above that floor.",
        "",
        "### Time to a ready pool",
        "",
        *_rows(stats["start"], 1.0, "s"),
        "",
        "### Warm round trip of a trivial cell",
        "",
        *_rows(stats["round_trip"], 1000.0, "ms"),
        "",
        "### The calls alone, timed inside the kernel",
        "",
        *_rows(stats.get("calls", {}), 1000.0, "ms"),
        "",
        "### Cold launch (for comparison)",
        "",
        *_rows(stats["launch"], 1.0, "s"),
        "",
        "### Targets",
        "",
    ]
    for v in payload["verdicts"]:
        lines.append(
            f"- {v['subject']} / {v['versus']} = **{v['ratio']:.4f}x** (target at most "
            f"{v['at_most']}x): {'met' if v['met'] else 'NOT met'}"
        )
    lines += harness.markdown_footer(NAME, payload["machine"], "time")
    return "\n".join(lines)


def _plot(payload: dict[str, Any]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [("start", "time to a ready pool"), ("round_trip", "warm round trip"), ("launch", "")]
    fig, ax = plt.subplots(figsize=(10, 4.6), dpi=110)
    labels, medians, colours = [], [], []
    for (key, _), colour in zip(groups, ("tab:blue", "tab:green", "tab:red"), strict=True):
        for label, s in payload["stats"][key].items():
            labels.append(label.replace(" ", "\n", 1))
            medians.append(s["median"])
            colours.append(colour)
    ax.barh(range(len(labels)), medians, color=colours)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("seconds (median, log scale): blue start, green warm cell, red cold launch")
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    machine = payload["machine"]
    ax.set_title(f"Worker pools, 2 CPU processes; {machine['cpu_model']}", fontsize=10)
    fig.tight_layout()
    return fig


def run(options: argparse.Namespace) -> None:
    """Time every subject alternately; print, and (unless --no-write) record the results."""
    started = time.monotonic()
    pools = [s for s in POOLS.values() if not (options.no_peers and s.peer)]
    launches = [k for k in LAUNCHES if not (options.no_peers and LAUNCHES[k].peer)]
    needed = [s.peer for s in pools] + [LAUNCHES[k].peer for k in launches]
    peers = tuple(sorted({peer for peer in needed if peer}))
    versions = harness.require_subjects(
        options, ("torch", "nbaccel", "jupyter_client", "ipykernel"), (*peers, "matplotlib")
    )
    reps = {
        "starts": harness.resolve(options, "pool_starts", 5, 1),
        "trips": harness.resolve(options, "pool_trips", 30, 3),
        "launches": harness.resolve(options, "pool_launches", 5, 1),
    }
    if min(reps.values()) < 1:
        raise SystemExit("pool: --pool_starts, --pool_trips and --pool_launches are at least 1.")
    print(f"{NAME}: pools {[s.label for s in pools]}, launches {launches}, {reps}", flush=True)
    machine = harness.machine_description(versions)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        runs = _measure(pools, launches, reps, options.pool_timeout)
    except HostError as exc:
        raise SystemExit(f"pool: {exc}") from None
    stats = {
        group: {label: harness.summarise(values) for label, values in by_label.items()}
        for group, by_label in runs.items()
    }
    payload: dict[str, Any] = {
        "benchmark": NAME,
        "machine": harness.finish_machine(machine, started),
        "config": {**reps, "processes": 2, "threads_per_process": 1},
        "stats": stats,
    }
    payload["verdicts"] = _verdicts(stats)
    harness.publish(options, NAME, payload, _markdown(payload), _plot)
