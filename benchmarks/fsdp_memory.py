"""Per-process memory of parameters + gradients + optimizer state, FSDP FULL_SHARD vs DDP, and
the time per step, on 2 and 4 CPU processes (gloo), both through nbaccel's Accelerator.

The model is 8 x Linear(512, 512) with Adam; FSDP is nbaccel's FSDP2 with every Linear wrapped.
Each rank counts the bytes of its local parameter, gradient and optimizer-state tensors right
after an optimizer step (before gradients are cleared: the moment all three exist), and times
each step; the figure for a launch is the largest rank's. The targets: FULL_SHARD at most 0.55x
DDP's bytes at 2 processes and 0.30x at 4. ``python -m benchmarks fsdp_memory``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import time
from typing import Any

import torch
from torch import nn

from . import harness

__all__ = ["NAME", "SUMMARY", "add_arguments", "run"]

NAME = "fsdp_memory"
SUMMARY = "params + grads + optimizer state per process, and ms/step: FSDP FULL_SHARD vs DDP"
LAYERS, WIDTH, BATCH = 8, 512, 16
TARGETS = {2: 0.55, 4: 0.30}
SUBJECTS = {"ddp": "DDP", "fsdp": "FSDP2 FULL_SHARD"}


def _local_bytes(tensor: Any) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return int(local.numel() * local.element_size())


def _state_bytes(model: nn.Module, opt: Any) -> dict[str, int]:
    params = list(model.parameters())
    state = [v for s in opt.optimizer.state.values() for v in s.values()]
    return {
        "params": sum(_local_bytes(p) for p in params),
        "grads": sum(_local_bytes(p.grad) for p in params if p.grad is not None),
        "optimizer": sum(_local_bytes(v) for v in state if torch.is_tensor(v) and v.dim()),
    }


def _run(kind: str, steps: int, threads: int) -> dict[str, Any]:
    """One rank: prepare the model with DDP or FSDP, run ``steps`` timed steps, count bytes."""
    from nbaccel import Accelerator
    from nbaccel.fsdp import FullyShardedDataParallelPlugin

    torch.set_num_threads(threads)
    plugin = None
    if kind == "fsdp":
        plugin = FullyShardedDataParallelPlugin(
            fsdp_version=2,  # reshard_after_forward=True (the default): FULL_SHARD
            auto_wrap_policy="transformer_based_wrap",
            transformer_cls_names_to_wrap=["Linear"],
        )
    acc = Accelerator(fsdp_plugin=plugin)
    torch.manual_seed(0)
    raw = nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
    model, opt = acc.prepare(raw, torch.optim.Adam(raw.parameters(), lr=1e-3))
    x = torch.randn(BATCH, WIDTH)
    times = []
    for step in range(steps + 2):  # two untimed steps first
        if step:
            opt.zero_grad()
        started = time.perf_counter()
        acc.backward(model(x).pow(2).mean())
        opt.step()
        if step >= 2:
            times.append(time.perf_counter() - started)
    counted = _state_bytes(model, opt)
    return {**counted, "bytes": sum(counted.values()), "step_s": statistics.median(times)}


def _launch(kind: str, world: int, steps: int) -> dict[str, Any]:
    from nbaccel import notebook_launcher

    harness.prewarm_imports()
    quiet = io.StringIO()  # the banner and the ranks' lines; a failure raises with its own
    with contextlib.redirect_stdout(quiet):
        ranks = notebook_launcher(
            _run,
            (kind, steps, harness.threads_per_process(world)),
            num_processes=world,
            start_method="fork",
        )
    worst = max(ranks, key=lambda r: r["bytes"])
    return {
        "bytes": worst["bytes"],
        "parts": {k: worst[k] for k in ("params", "grads", "optimizer")},
        "step_s": max(r["step_s"] for r in ranks),
    }


# -- options -----------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    group = parser.add_argument_group(NAME)
    group.add_argument("--fsdp_reps", type=int, default=None, help="counted launches (5)")
    group.add_argument("--fsdp_worlds", default=None, help="process counts (default 2,4)")
    group.add_argument("--fsdp_steps", type=int, default=None, help="timed steps a launch (10)")


def _measure(world: int, reps: int, steps: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in SUBJECTS}
    for rep in range(reps + 1):
        for kind in SUBJECTS:
            result = _launch(kind, world, steps)
            print(
                f"  {world} procs {'warm-up' if rep == 0 else f'rep {rep}/{reps}':<10} "
                f"{SUBJECTS[kind]:<17} {result['bytes'] / 2**20:8.2f} MiB "
                f"{1e3 * result['step_s']:8.2f} ms/step",
                flush=True,
            )
            if rep:
                runs[kind].append(result)
    out: dict[str, Any] = {"runs": runs}
    for kind, results in runs.items():
        sizes = {r["bytes"] for r in results}
        if len(sizes) != 1:
            raise RuntimeError(f"{SUBJECTS[kind]} at {world} processes: bytes differ: {sizes}")
        out[kind] = {
            "bytes": results[0]["bytes"],
            "parts": results[0]["parts"],
            "step_s": harness.summarise([r["step_s"] for r in results]),
        }
    out["memory_ratio"] = out["fsdp"]["bytes"] / out["ddp"]["bytes"]
    out["time_ratio"] = out["fsdp"]["step_s"]["median"] / out["ddp"]["step_s"]["median"]
    out["target"] = TARGETS.get(world, 1.0 / world + 0.05)
    out["met"] = out["memory_ratio"] <= out["target"]
    return out


def _markdown(payload: dict[str, Any]) -> str:
    rows = [
        "| Processes | DDP MiB | FSDP MiB | FSDP / DDP memory | target | DDP ms/step"
        " | FSDP ms/step | FSDP / DDP time |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for world, r in payload["results"].items():
        d, f = r["ddp"], r["fsdp"]
        rows.append(
            f"| {world} | {d['bytes'] / 2**20:.2f} | {f['bytes'] / 2**20:.2f} | "
            f"**{r['memory_ratio']:.3f}x** | at most {r['target']:.2f}x "
            f"({'met' if r['met'] else 'NOT met'}) | "
            f"{1e3 * d['step_s']['median']:.1f} ({1e3 * d['step_s']['min']:.1f} - "
            f"{1e3 * d['step_s']['max']:.1f}) | {1e3 * f['step_s']['median']:.1f} "
            f"({1e3 * f['step_s']['min']:.1f} - {1e3 * f['step_s']['max']:.1f}) | "
            f"{r['time_ratio']:.2f}x |"
        )
    c = payload["config"]
    return f"""## FSDP memory (`fsdp_memory`)

Per-process bytes of parameters + gradients + optimizer state, FSDP2 FULL_SHARD (every Linear
wrapped) vs DDP, both through nbaccel's `Accelerator` on CPU processes (gloo, launched with
nbaccel's `notebook_launcher`, fork). Model: {LAYERS} x Linear({WIDTH}, {WIDTH}), Adam, batch
{BATCH}. Each rank counts its local tensors right after an optimizer step (all three exist
then; FSDP's briefly unsharded parameters during forward and backward are not counted) and
times {c["steps"]} steps after 2 untimed ones (median step); a launch reports its largest rank.
{c["reps"]} launches per subject after one warm-up, DDP and FSDP alternating; memory is the
same in every launch (checked), ms/step is median (min - max) over the launches.

{chr(10).join(rows)}

On CPU, FSDP's all-gathers and reduce-scatters over gloo cost more than they save on small
matrix multiplications, so it is slower per step; the memory is what it buys. Every launch is in
`benchmarks/results/{NAME}.json`.

{harness.machine_markdown(payload["machine"], f"python -m benchmarks {NAME}")}

![{NAME}](img/{NAME}.png)
"""


def _plot(payload: dict[str, Any]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = payload["results"]
    worlds = list(results)
    fig, (mem, step) = plt.subplots(1, 2, figsize=(9, 4), dpi=120)
    for i, (kind, label) in enumerate(SUBJECTS.items()):
        xs = [j + (i - 0.5) * 0.38 for j in range(len(worlds))]
        mem.bar(xs, [results[w][kind]["bytes"] / 2**20 for w in worlds], 0.38, label=label)
        stats = [results[w][kind]["step_s"] for w in worlds]
        med = [1e3 * s["median"] for s in stats]
        step.bar(
            xs,
            med,
            0.38,
            label=label,
            capsize=4,
            yerr=[
                [m - 1e3 * s["min"] for m, s in zip(med, stats, strict=True)],
                [1e3 * s["max"] - m for m, s in zip(med, stats, strict=True)],
            ],
        )
    for ax, ylabel in (
        (mem, "MiB per process (params + grads + Adam state)"),
        (step, "ms per step (median; bars min-max)"),
    ):
        ax.set_xticks(range(len(worlds)))
        ax.set_xticklabels([f"{w} processes" for w in worlds])
        ax.set_ylabel(ylabel, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    machine = payload["machine"]
    fig.suptitle(
        f"FSDP FULL_SHARD vs DDP, {LAYERS} x Linear({WIDTH}, {WIDTH}), CPU gloo; "
        f"{machine['cpu_model']}, {machine['usable_cores']} cores",
        fontsize=10,
    )
    return fig


def run(options: argparse.Namespace) -> None:
    """Measure, print, and (unless --no-write) write JSON, docs section and plot."""
    started = time.monotonic()
    versions = harness.require_subjects(options, ("torch", "nbaccel"), ("matplotlib",))
    reps = harness.resolve(options, "fsdp_reps", 5, 1)
    steps = harness.resolve(options, "fsdp_steps", 10, 2)
    worlds = [int(w) for w in str(harness.resolve(options, "fsdp_worlds", "2,4", "2")).split(",")]
    if reps < 1 or steps < 1 or not worlds or min(worlds) < 2:
        raise SystemExit("fsdp_memory: --fsdp_reps, --fsdp_steps >= 1; worlds >= 2.")
    print(
        f"{NAME}: DDP vs FSDP at {worlds} processes, 1 warm-up + {reps} launches each", flush=True
    )
    machine = harness.machine_description(versions)
    results = {str(w): _measure(w, reps, steps) for w in worlds}
    payload = {
        "benchmark": NAME,
        "machine": harness.finish_machine(machine, started),
        "config": {
            "reps": reps,
            "steps": steps,
            "worlds": worlds,
            "layers": LAYERS,
            "width": WIDTH,
            "batch": BATCH,
        },
        "results": results,
    }
    text = _markdown(payload)
    print(text)
    for world, r in results.items():
        verdict = "meets" if r["met"] else "MISSES"
        print(
            f"{world} processes: FSDP / DDP memory {r['memory_ratio']:.3f}x ({verdict} the "
            f"{r['target']:.2f}x target); time per step {r['time_ratio']:.2f}x DDP's"
        )
    if not getattr(options, "no_write", False):
        harness.write_json(NAME, payload)
        harness.save_figure(_plot(payload), NAME)
        harness.update_docs_section(NAME, text)
