"""The Ray part of ``python -m benchmarks multihost``: one notebook's process driving a Ray
cluster's two nodes.

The cluster is the Ray tier's test bed (``tests/ray/bed_ray.py``: a head with no CPU on a login
machine and two 1-CPU nodes, each a network namespace running a real ``ray start``; root
needed), built for the run under its own prefix and removed after it. From one Python process
on the login machine (``multihost_ray_driver.py``), which joins the cluster once with
``ray.init()``, both subjects run a function that joins the process group and all-reduces one
tensor on 2 nodes x 1 rank:

- **nbaccel**: ``notebook_launcher(task, num_processes=1, hosts="ray")``;
- **Ray Train**: ``TorchTrainer(task, scaling_config=ScalingConfig(num_workers=2,
  use_gpu=False), run_config=RunConfig(storage_path=...)).fit()`` (it joins the gloo group
  before calling the function).

Cold launches alternate, one uncounted warm-up each. Then nbaccel's pool on the same nodes
(``WorkerPool(hosts="ray")``): its start and its warm round trips.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from . import harness

TARGET_RATIO = 0.25  # nbaccel's cold launch at most a quarter of TorchTrainer.fit()'s
TARGET_CALL_MS = 5.0  # a warm pool call across the nodes
PREFIX = "nbq"  # the Ray tier's tests use "nbr": a benchmark run beside them takes others
_ROOT = Path(__file__).resolve().parents[1]
_DRIVER = Path(__file__).resolve().with_name("multihost_ray_driver.py")
LABELS = {
    "nbaccel": 'nbaccel `notebook_launcher(hosts="ray")`',
    "torchtrainer": "Ray Train `TorchTrainer.fit()`",
}


def add_arguments(group: argparse._ArgumentGroup) -> None:
    """The Ray part's options, in ``multihost``'s group."""
    group.add_argument(
        "--no-ray", dest="no_ray", action="store_true", help="skip the Ray cluster part"
    )
    group.add_argument("--ray_reps", type=int, default=None, help="Ray cold launches (5)")
    group.add_argument("--ray_calls", type=int, default=None, help="Ray pool calls (200)")


def unavailable(peers: bool) -> str | None:
    """Why the Ray bed cannot run here, or None."""
    needed = ["ray", "aiohttp"] + (["ray.train"] if peers else [])
    missing = [name for name in needed if _missing(name)]
    if missing:
        return (
            f"{', '.join(missing)} not installed (pip install 'ray[default,train]' "
            "into this environment)"
        )
    if not (Path(sys.executable).parent / "ray").exists():
        return f"no `ray` command beside {sys.executable}"
    if os.geteuid() != 0:
        return "the Ray bed builds network namespaces: run it as root"
    if shutil.which("ip") is None:
        return "the Ray bed needs iproute2's `ip`"
    probe = f"{PREFIX}-probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` is refused here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:  # the parent package is missing
        return True


def versions(peers: bool) -> dict[str, str]:
    """Ray's version, for the machine paragraph."""
    return {"ray": importlib.metadata.version("ray")} if peers or not _missing("ray") else {}


def _drive(reps: int, calls: int, peers: bool) -> dict[str, Any]:
    sys.path.insert(0, str(_ROOT))  # the bed lives with the Ray tier's tests
    from tests.ray.bed_ray import RayBed

    bed = RayBed(prefix=PREFIX)
    bed.start()
    print(f"  the Ray bed started in {bed.setup_seconds:.1f} s", flush=True)
    tail: collections.deque[str] = collections.deque(maxlen=60)
    try:
        command = [sys.executable, str(_DRIVER), str(reps), str(calls), str(bed.root / "train")]
        if not peers:
            command.append("--no-peers")
        driver = bed.popen(
            "login", command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        limit = 300 + 120 * (reps + 1)
        killed = threading.Event()
        watchdog = threading.Timer(limit, _kill_group, (driver.pid, killed))  # a hung driver
        watchdog.start()
        result = None
        assert driver.stdout is not None
        for line in driver.stdout:
            if line.startswith("[progress]"):
                print("  " + line[len("[progress]") :].strip(), flush=True)
            elif line.startswith("RESULT "):
                result = json.loads(line[len("RESULT ") :])
            else:
                tail.append(line.rstrip())
        code = driver.wait()
        watchdog.cancel()
        if killed.is_set():
            tail.append(f"(the benchmark killed it after {limit} s)")
    finally:
        bed.close()
        print(f"  the Ray bed closed in {bed.teardown_seconds:.1f} s", flush=True)
    if code != 0 or result is None:
        raise RuntimeError(
            f"multihost (Ray): the driver failed (exit status {code}); its last output:\n"
            + "\n".join(tail)
        )
    result["bed_start_s"] = bed.setup_seconds
    return result


def _kill_group(pid: int, killed: threading.Event) -> None:
    killed.set()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def measure(options: argparse.Namespace, peers: bool) -> dict[str, Any]:
    """Run the Ray part (or say why not): ``{"skipped": reason}`` or its config, summary and
    runs."""
    reason = "--no-ray was given" if getattr(options, "no_ray", False) else unavailable(peers)
    if reason:
        print(f"multihost: the Ray part is skipped: {reason}", flush=True)
        return {"skipped": reason}
    reps = harness.resolve(options, "ray_reps", 5, 1)
    calls = harness.resolve(options, "ray_calls", 200, 20)
    print(
        f"multihost (Ray): {reps} + 1 warm-up cold launches per subject, {calls} pool calls",
        flush=True,
    )
    raw = _drive(reps, calls, peers)
    return {
        "config": {"reps": reps, "calls": calls, "nodes": 2, "per_node": 1},
        "summary": _summary(raw),
        "runs": raw,
    }


def _median_phases(phases: list[dict[str, float]]) -> dict[str, float]:
    import statistics

    return {key: statistics.median(p[key] for p in phases) for key in phases[0]}


def _summary(raw: dict[str, Any]) -> dict[str, Any]:
    subjects = [s for s in ("nbaccel", "torchtrainer") if raw.get(s)]
    pool = raw["pool"]
    out: dict[str, Any] = {
        "cold_s": {s: harness.summarise(raw[s]) for s in subjects},
        "phases_s": {s: _median_phases(raw[f"{s}_phases"]) for s in subjects},
        "pool_call_ms": harness.summarise(pool["run_ms"]),
        "pool_execute_ms": harness.summarise(pool["execute_ms"]),
        "pool_start_s": pool["start_s"],
        "parts_s": raw["parts"],
    }
    if "torchtrainer" in subjects:
        cold = out["cold_s"]
        ratio = cold["nbaccel"]["median"] / cold["torchtrainer"]["median"]
        out["ratio_to_torchtrainer"] = ratio
        out["ratio_met"] = ratio <= TARGET_RATIO
    out["pool_call_met"] = out["pool_call_ms"]["median"] <= TARGET_CALL_MS
    return out


def text(ray: dict[str, Any]) -> list[str]:
    """The Ray part's lines of the markdown section."""
    lines = ["", "### The same notebook on a Ray cluster", ""]
    if "skipped" in ray:
        return [*lines, f"Not run: {ray['skipped']}."]
    summary, config = ray["summary"], ray["config"]
    lines += [
        "A cold launch of a function that joins the process group and all-reduces one tensor "
        "on 2 nodes x 1 rank of a real Ray cluster: the Ray tier's bed (`tests/ray/bed_ray.py`: "
        "a head with 0 CPUs on the login machine and two nodes of 1 CPU each, network "
        "namespaces running real `ray start`, on this one machine; CPU only, gloo). Both "
        "subjects launch from one Python process on the head, which joined the cluster once "
        "(`ray.init()` with `RAY_ADDRESS`) before anything was timed; TorchTrainer's storage "
        f"is a directory all nodes share. {config['reps']} launches per subject, alternating, "
        "after one uncounted warm-up each; each starts once the cluster's 2 CPUs are free "
        "again and the machine is quiet (at most a quarter of its cores busy over half a "
        "second: the last subject's processes done exiting; untimed).",
        "",
        "| Subject | seconds (median) | min - max | until the function ran | join the group "
        "| all-reduce | after its return |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for subject, cold in summary["cold_s"].items():
        p = summary["phases_s"][subject]
        lines.append(
            f"| {LABELS[subject]} | {cold['median']:.2f} | {cold['min']:.2f} - "
            f"{cold['max']:.2f} | {p['up']:.2f} | {p['join']:.2f} | {p['work']:.3f} | "
            f"{p['down']:.2f} |"
        )
    lines += [
        "",
        "The phases are medians of rank 0's clock stamps against the driver's (one kernel, one "
        "clock); Ray Train joins the group before it calls the function.",
    ]
    if "ratio_to_torchtrainer" in summary:
        ratio = summary["ratio_to_torchtrainer"]
        verdict = "meets" if summary["ratio_met"] else "MISSES"
        lines += [
            "",
            f"nbaccel / TorchTrainer: **{ratio:.2f}x** (target <= {TARGET_RATIO}x: {verdict}).",
        ]
    call, execute = summary["pool_call_ms"], summary["pool_execute_ms"]
    verdict = "meets" if summary["pool_call_met"] else "MISSES"
    lines += [
        "",
        f'nbaccel\'s pool on the same nodes (`WorkerPool(hosts="ray")`) started in '
        f"{summary['pool_start_s']:.2f} s; a warm `pool.run(lambda: 1)` to both ranks took "
        f"**{call['median']:.2f} ms** (median of {config['calls']}; min {call['min']:.2f}, max "
        f"{call['max']:.2f}; target <= {TARGET_CALL_MS} ms: {verdict}), "
        f'`pool.execute("1 + 1")` {execute["median"]:.2f} ms (min {execute["min"]:.2f}, max '
        f"{execute['max']:.2f}).",
        *_where_the_time_goes(ray),
    ]
    return lines


def _where_the_time_goes(ray: dict[str, Any]) -> list[str]:
    summary, runs = ray["summary"], ray["runs"]
    parts, phases, launches = summary["parts_s"], summary["phases_s"], ray["config"]["reps"] + 1
    steps = (
        ("placement_group_s", "a `STRICT_SPREAD` placement group of the 2 CPUs"),
        ("actor_start_s", "a fresh Ray worker process per node, answering as an actor"),
        (
            "agent_process_s",
            "then a fresh interpreter importing what the agent (`python -m "
            "nbaccel.launch.agent`, started by the actor) imports: nbaccel and torch",
        ),
    )
    total = sum(parts[key] for key, _ in steps)
    each = "; ".join(f"{what}: {parts[key]:.3g} s" for key, what in steps)
    lines = [
        "",
        "Where the time goes. Each part of a launch, timed alone on the same cluster after the "
        f"launches (the two nodes side by side): {each}. Together about {total:.2f} s, against "
        f"nbaccel's {phases['nbaccel']['up']:.2f} s until the function ran: nbaccel's launch on "
        "Ray is a Ray worker process per node for the agent's actor (whose class travels by "
        "value and imports only the standard library), then the agent's own cold start, which "
        "imports torch and nbaccel once (the rank is forked from it, with both imported).",
    ]
    if "torchtrainer" in phases:
        actors = {k: v for k, v in runs.get("actors", {}).items() if k != "_Probe"}
        counts = ", ".join(f"{k} {v}" for k, v in sorted(actors.items())) or "not read"
        up, down = phases["torchtrainer"]["up"], phases["torchtrainer"]["down"]
        lines += [
            "",
            f"TorchTrainer.fit() took {up:.2f} s until the function ran: Ray Train V2 starts "
            "its controller actor, reserves a placement group, starts a worker actor per node "
            "(each a fresh Ray worker process, started through Ray's runtime-env set-up, "
            "`setup_worker.py`, as Ray Train gives its actors environment variables of their "
            "own), imports torch there and joins the gloo group before it calls the function; "
            f"then {down:.2f} s after the function returned: its controller polls the worker "
            "group every 2 s by default (`RAY_TRAIN_HEALTH_CHECK_INTERVAL_S`), so it sees the "
            "end up to 2 s late, then tears the worker group and itself down and writes the "
            "run's state to the storage path. Ray Train's defaults are kept, as a user has "
            f"them. The actors the run started for its {launches} launches per subject and the "
            "pool, by Ray's state API (nbaccel's are `AgentHost`, 2 a launch): "
            f"{counts}.",
        ]
    lines.append(
        f"\nNot counted: the driver's `ray.init()` ({runs['ray_init_s']:.2f} s) and the bed's "
        f"start ({runs['bed_start_s']:.1f} s)."
    )
    return lines


def plot(ax: Any, ray: dict[str, Any]) -> None:
    """The Ray part's cold launches on ``ax``."""
    cold = ray["summary"]["cold_s"]
    names = list(cold)
    ax.bar(names, [cold[n]["median"] for n in names], color=["#1f77b4", "#7f7f7f"][: len(names)])
    for i, name in enumerate(names):
        ax.scatter([i] * len(cold[name]["values"]), cold[name]["values"], color="black")
    ax.set_title("Cold launch, Ray cluster, 2 nodes x 1 rank", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
