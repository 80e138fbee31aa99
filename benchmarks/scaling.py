"""The scaling picture: training samples/s at 1, 2 and 4 CPU processes (gloo), nbaccel's
Accelerator vs the hand-written DDP loop, with ``ddp_throughput``'s model, data and loop (the
GPU side of the picture is ``gpt_bf16``).

Each rank trains ``batch_size`` samples per step (the global batch grows with the processes),
with the usable cores shared out between the ranks (at least one thread each, so 4 processes on
2 cores oversubscribe them: that is part of the picture). Per process count: one uncounted
warm-up repetition per subject, then the counted ones, subjects alternating, fresh processes
each time; every subject must end with the same parameters as the hand-written loop.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import asdict
from typing import Any

from . import ddp_throughput as ddp
from . import harness

__all__ = ["NAME", "SUMMARY", "add_arguments", "run"]

NAME = "scaling"
SUMMARY = "samples/s at 1, 2, 4 CPU processes, nbaccel vs hand-written DDP"
SUBJECTS = {"torch_ddp": "hand-written torch DDP", "nbaccel": "nbaccel Accelerator"}
BASELINE = "torch_ddp"


# -- options -----------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    group = parser.add_argument_group(NAME)
    group.add_argument("--scaling_reps", type=int, default=None, help="counted reps (5)")
    group.add_argument("--scaling_steps", type=int, default=None, help="timed steps per rep (150)")
    group.add_argument("--scaling_worlds", default=None, help="process counts (default 1,2,4)")


# -- CPU ---------------------------------------------------------------------------------------
def _cpu(options: argparse.Namespace, subjects: list[str]) -> dict[str, Any]:
    reps = harness.resolve(options, "scaling_reps", 5, 1)
    steps = harness.resolve(options, "scaling_steps", 150, 10)
    worlds = [
        int(w) for w in str(harness.resolve(options, "scaling_worlds", "1,2,4", "1,2")).split(",")
    ]
    if reps < 1 or steps < 1 or not worlds or min(worlds) < 1:
        raise SystemExit("scaling: --scaling_reps, --scaling_steps >= 1; worlds >= 1.")
    out: dict[str, Any] = {}
    for world in worlds:
        config = ddp.Config(
            world_size=world,
            steps=steps,
            warmup_steps=10,
            reps=reps,
            threads=harness.threads_per_process(world),
        )
        runs: dict[str, list[dict[str, Any]]] = {s: [] for s in subjects}
        for rep in range(reps + 1):
            for subject in subjects:
                result = harness.launch_ranks(ddp.worker, (subject, config), world)
                if result["threads"] != config.threads:
                    raise RuntimeError(
                        f"{SUBJECTS[subject]} ran with {result['threads']} "
                        f"threads, not {config.threads}."
                    )
                result["samples_per_s"] = result["samples"] / result["seconds"]
                print(
                    f"  {world} procs {'warm-up' if rep == 0 else f'rep {rep}/{reps}':<10} "
                    f"{SUBJECTS[subject]:<24} {result['samples_per_s']:9.0f} samples/s",
                    flush=True,
                )
                if rep:
                    runs[subject].append(result)
        ddp.check_same_training(runs)
        base = statistics.median(r["samples_per_s"] for r in runs[BASELINE])
        out[str(world)] = {
            "config": asdict(config),
            "subjects": {
                s: {
                    "label": SUBJECTS[s],
                    "samples_per_s": harness.summarise([r["samples_per_s"] for r in results]),
                    "ratio_to_hand_written": statistics.median(r["samples_per_s"] for r in results)
                    / base,
                }
                for s, results in runs.items()
            },
            "runs": runs,
        }
    if "1" in out:
        for by_world in out.values():
            for subject, item in by_world["subjects"].items():
                one = out["1"]["subjects"][subject]["samples_per_s"]["median"]
                world = by_world["config"]["world_size"]
                item["speedup_vs_1"] = item["samples_per_s"]["median"] / one
                item["efficiency"] = item["speedup_vs_1"] / world
    return out


# -- report ------------------------------------------------------------------------------------
def _markdown(payload: dict[str, Any]) -> str:
    cpu = payload["cpu"]
    rows = [
        "| Processes | threads each | Subject | samples/s median (min - max) | vs hand-written"
        " | speed-up vs 1 process | efficiency |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for world, by_world in cpu.items():
        for item in by_world["subjects"].values():
            s = item["samples_per_s"]
            speed = f"{item['speedup_vs_1']:.2f}x" if "speedup_vs_1" in item else "-"
            eff = f"{100 * item['efficiency']:.0f}%" if "efficiency" in item else "-"
            rows.append(
                f"| {world} | {by_world['config']['threads']} | {item['label']} | "
                f"{s['median']:,.0f} ({s['min']:,.0f} - {s['max']:,.0f}) | "
                f"**{item['ratio_to_hand_written']:.3f}x** | {speed} | {eff} |"
            )
    config = next(iter(cpu.values()))["config"]
    return f"""## Scaling picture (`scaling`)

### CPU: samples/s at {", ".join(cpu)} processes

`ddp_throughput`'s model ({config["layers"]} x Linear({config["features"]}, {config["features"]})
+ ReLU, then Linear({config["features"]}, {config["classes"]}); SGD with momentum) and loop,
{config["batch_size"]} samples per rank per step (the global batch grows with the processes),
{config["steps"]} timed steps after {config["warmup_steps"]}, gloo; the usable cores are shared
out between the ranks (at least one thread each: 4 processes on 2 cores oversubscribe them), so
on a machine whose one process already has every usable core, more processes add gradient
all-reduces over gloo, not compute: the curve shows what DDP's communication costs here.
Hand-written: `torch.distributed` + `DistributedDataParallel`, also on a one-process group (as
a script written for N processes runs with N = 1); nbaccel: `Accelerator(cpu=True)` +
`prepare`, which wraps nothing in DDP on one process (nor does Accelerate).
{config["reps"]} repetitions per subject after one warm-up, subjects alternating, fresh
processes each time; every subject ends with the same parameters (checked). Speed-up =
samples/s / samples/s at 1 process; efficiency = speed-up / processes.

{chr(10).join(rows)}

The GPU side of the picture (a GPT-style model in bf16) is `gpt_bf16`'s section.

Every repetition is in `benchmarks/results/{NAME}.json`.

{harness.machine_markdown(payload["machine"], f"python -m benchmarks {NAME}")}

![{NAME}](img/{NAME}.png)
"""


def _plot(payload: dict[str, Any]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cpu = payload["cpu"]
    worlds = [int(w) for w in cpu]
    fig, ax = plt.subplots(figsize=(7, 4.4), dpi=120)
    for subject, label in SUBJECTS.items():
        if subject not in cpu[str(worlds[0])]["subjects"]:
            continue
        stats = [cpu[str(w)]["subjects"][subject]["samples_per_s"] for w in worlds]
        med = [s["median"] for s in stats]
        ax.errorbar(
            worlds,
            med,
            yerr=[
                [m - s["min"] for m, s in zip(med, stats, strict=True)],
                [s["max"] - m for m, s in zip(med, stats, strict=True)],
            ],
            marker="o",
            capsize=4,
            label=label,
        )
    if "1" in cpu:  # one process already has every usable core: more add no compute here
        one = cpu["1"]["subjects"][BASELINE]["samples_per_s"]["median"]
        ax.axhline(one, color="k", linestyle=":", alpha=0.5, label="hand-written, 1 process")
    ax.set_xticks(worlds)
    ax.set_xlabel("processes")
    ax.set_ylabel("samples/s (median; bars min-max)")
    machine = payload["machine"]
    ax.set_title(
        f"CPU scaling (gloo), {machine['cpu_model']}, {machine['usable_cores']} cores", fontsize=10
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def run(options: argparse.Namespace) -> None:
    """Measure, print, and (unless --no-write) write JSON, docs section and plot."""
    started = time.monotonic()
    versions = harness.require_subjects(options, ("torch", "nbaccel"), ("matplotlib",))
    print(
        f"{NAME}: {list(SUBJECTS.values())} at 1, 2, 4 CPU processes",
        flush=True,
    )
    machine = harness.machine_description(versions)
    cpu = _cpu(options, list(SUBJECTS))
    payload = {
        "benchmark": NAME,
        "machine": harness.finish_machine(machine, started),
        "cpu": cpu,
    }
    text = _markdown(payload)
    harness.publish(options, NAME, payload, text, _plot)
