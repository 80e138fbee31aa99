"""``python -m benchmarks multihost``: one notebook's process driving two machines.

The machines are the hosts tier's test bed (``tests/hosts/bed.py``: a login machine and two
nodes as network namespaces, each with its own host name and a real sshd; root needed), built
for the run under its own prefix and removed after it. From one Python process on the login
machine (``multihost_driver.py``) every subject starts 2 ranks on each node over ssh, runs a
trivial function that joins the process group and returns its host and rank, and ends:

- **nbaccel**: ``notebook_launcher(task, num_processes=2, hosts=["node1", "node2"])``;
- **torchrunx**: ``torchrunx.Launcher(hostnames=[...], workers_per_host=2, backend="gloo")``
  (it starts its agents over ssh with fabric);

cold launches alternate, one uncounted warm-up each. Then nbaccel's pool on the same hosts:
its start, and the warm round trip of ``pool.run(lambda: 1)`` to all 4 ranks.

Then the same on a Ray cluster (``multihost_ray.py``: nbaccel's ``hosts="ray"`` against Ray
Train's ``TorchTrainer``), skipped with a printed reason where Ray or its bed cannot run here
(``--no-ray`` skips it too; ``--no-ssh`` runs the Ray part alone, without writing).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import harness, multihost_ray

NAME = "multihost"
SUMMARY = (
    "cold launch on 2 hosts x 2 ranks over ssh vs torchrunx, on 2 Ray nodes vs Ray Train's "
    "TorchTrainer; warm pool round trips"
)
TARGET_RATIO = 0.5  # nbaccel's cold launch at most half of torchrunx's
TARGET_CALL_MS = 5.0  # a warm pool call across the hosts
_ROOT = Path(__file__).resolve().parents[1]
_DRIVER = Path(__file__).resolve().with_name("multihost_driver.py")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    group = parser.add_argument_group(NAME)
    group.add_argument("--multihost_reps", type=int, default=None, help="cold launches (5)")
    group.add_argument("--multihost_calls", type=int, default=None, help="pool calls (200)")
    group.add_argument(
        "--no-ssh",
        dest="no_ssh",
        action="store_true",
        help="skip the ssh hosts part (the Ray part alone; implies --no-write)",
    )
    multihost_ray.add_arguments(group)


def _drive(reps: int, calls: int, peers: bool) -> dict[str, Any]:
    sys.path.insert(0, str(_ROOT))  # the bed lives with the hosts tier's tests
    from tests.hosts.bed import HostBed

    if os.geteuid() != 0:
        raise SystemExit(f"{NAME}: builds network namespaces with sshd: run it as root.")
    bed = HostBed(prefix="nbm")
    bed.start()
    try:
        command = [sys.executable, str(_DRIVER), str(reps), str(calls), "node1,node2", "2"]
        if not peers:
            command.append("--no-peers")
        done = bed.run(
            "login", command, timeout=600 + 60 * reps, capture_output=False, stdout=subprocess.PIPE
        )
    finally:
        bed.close()
    if done.returncode != 0:
        raise RuntimeError(f"{NAME}: the driver failed ({done.returncode}):\n{done.stdout[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _summary(raw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "cold_s": {s: harness.summarise(raw[s]) for s in ("nbaccel", "torchrunx") if raw[s]},
        "pool_call_ms": harness.summarise(raw["pool_call_ms"]),
        "pool_start_s": raw["pool_start_s"],
    }
    if "torchrunx" in out["cold_s"]:
        cold = out["cold_s"]
        out["ratio_to_torchrunx"] = cold["nbaccel"]["median"] / cold["torchrunx"]["median"]
    return out


def _text(payload: dict[str, Any]) -> str:
    lines = ["## One notebook, two machines (`multihost`)", ""]
    if payload["summary"] is None:
        lines.append("The ssh hosts part was not run (`--no-ssh`).")
    else:
        lines += _ssh_text(payload["summary"], payload["config"])
    lines += multihost_ray.text(payload["ray"])
    lines += harness.markdown_footer(NAME, payload["machine"], "launch and call")
    return "\n".join(lines)


def _ssh_text(summary: dict[str, Any], config: dict[str, Any]) -> list[str]:
    rows = ["| Subject | seconds (median) | min - max |", "| --- | ---: | ---: |"]
    labels = {"nbaccel": "nbaccel `notebook_launcher(hosts=)`", "torchrunx": "torchrunx 0.4"}
    for subject, cold in summary["cold_s"].items():
        rows.append(
            f"| {labels[subject]} | {cold['median']:.2f} | {cold['min']:.2f} - {cold['max']:.2f} |"
        )
    call = summary["pool_call_ms"]
    lines = [
        "A cold launch of a trivial function (join the process group, return host and rank) on "
        "2 machines x 2 ranks, started over ssh from one process on a third machine: the hosts "
        "tier's bed (network namespaces with their own host names and real sshd, on this one "
        f"machine). {config['reps']} launches per subject, alternating, after one uncounted "
        "warm-up each.",
        "",
        *rows,
        "",
    ]
    if "ratio_to_torchrunx" in summary:
        ratio = summary["ratio_to_torchrunx"]
        verdict = "meets" if ratio <= TARGET_RATIO else "MISSES"
        lines.append(
            f"nbaccel / torchrunx: **{ratio:.2f}x** (target <= {TARGET_RATIO}x: {verdict})."
        )
    verdict = "meets" if call["median"] <= TARGET_CALL_MS else "MISSES"
    lines += [
        "",
        f"nbaccel's pool on the same hosts started in {summary['pool_start_s']:.2f} s; a warm "
        f"`pool.run(lambda: 1)` to all 4 ranks took **{call['median']:.2f} ms** (median of "
        f"{config['calls']}; min {call['min']:.2f}, max {call['max']:.2f}; target <= "
        f"{TARGET_CALL_MS} ms: {verdict}).",
    ]
    return lines


def _plot(payload: dict[str, Any]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ray = payload["ray"] if "summary" in payload["ray"] else None
    panels = (payload["summary"] is not None) + (ray is not None)
    fig, axes = plt.subplots(1, max(panels, 1), figsize=(6.0 * max(panels, 1), 3.4), dpi=120)
    axes = list(axes) if panels > 1 else [axes]
    if payload["summary"] is not None:
        ax = axes.pop(0)
        cold = payload["summary"]["cold_s"]
        names = list(cold)
        colors = ["#1f77b4", "#7f7f7f"][: len(names)]
        ax.bar(names, [cold[n]["median"] for n in names], color=colors)
        for i, name in enumerate(names):
            ax.scatter([i] * len(cold[name]["values"]), cold[name]["values"], color="black")
        ax.set_title("Cold launch, 2 hosts x 2 ranks over ssh", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    if ray is not None:
        multihost_ray.plot(axes.pop(0), ray)
    fig.axes[0].set_ylabel("seconds (median; dots: launches)")
    return fig


def run(options: argparse.Namespace) -> None:
    """Build the hosts bed, run the driver on its login machine; then the Ray part; publish."""
    started = time.monotonic()
    peers = not getattr(options, "no_peers", False)
    ssh = not getattr(options, "no_ssh", False)
    if not ssh:
        options.no_write = True  # a partial run leaves the published figures alone
    own, others = ("torch", "nbaccel"), ("torchrunx",) if ssh else ()
    versions = harness.require_subjects(options, own, others)
    reps = harness.resolve(options, "multihost_reps", 5, 1)
    calls = harness.resolve(options, "multihost_calls", 200, 20)
    machine = harness.machine_description(versions)
    raw = summary = None
    if ssh:
        print(
            f"{NAME}: {reps} + 1 warm-up cold launches per subject, {calls} pool calls",
            flush=True,
        )
        raw = _drive(reps, calls, peers)
        summary = _summary(raw)
    ray = multihost_ray.measure(options, peers)
    if "summary" in ray:
        machine["versions"].update(multihost_ray.versions(peers))
    payload = {
        "benchmark": NAME,
        "machine": harness.finish_machine(machine, started),
        "config": {"reps": reps, "calls": calls, "hosts": 2, "per_host": 2},
        "summary": summary,
        "runs": raw,
        "ray": ray,
    }
    harness.publish(options, NAME, payload, _text(payload), _plot)
