"""The ``deepspeed`` benchmark's figures: the summary of its rounds, the docs section, the
verdicts it prints and its plot (:mod:`benchmarks.deepspeed` measures)."""

from __future__ import annotations

import statistics
import textwrap
from typing import Any

from . import harness

__all__ = ["SUBJECTS", "TARGETS", "markdown", "plot", "summary", "verdicts"]

NAME = "deepspeed"
SUBJECTS: dict[str, str] = {
    "nbaccel_zero2": "nbaccel Accelerator, ZeRO-2",
    "deepspeed_zero2": "hand-written DeepSpeed, ZeRO-2",
    "tuned_zero2": "by hand, nbaccel's malloc, ZeRO-2",
    "nbaccel_zero3": "nbaccel Accelerator, ZeRO-3",
    "deepspeed_zero3": "hand-written DeepSpeed, ZeRO-3",
    "tuned_zero3": "by hand, nbaccel's malloc, ZeRO-3",
    "nbaccel_ddp": "nbaccel Accelerator, DDP (no plugin)",
}
TARGETS = {"time": 1.02, "memory": 0.55}
_RATIOS = [  # subject, versus, target
    ("nbaccel_zero2", "deepspeed_zero2", TARGETS["time"]),
    ("nbaccel_zero3", "deepspeed_zero3", TARGETS["time"]),
    ("nbaccel_zero2", "tuned_zero2", TARGETS["time"]),
    ("nbaccel_zero3", "tuned_zero3", TARGETS["time"]),
    ("nbaccel_zero2", "nbaccel_ddp", None),
    ("nbaccel_zero3", "nbaccel_ddp", None),
]


MEMORY_ROWS = (
    ("ddp", "DDP (nbaccel)"),
    ("zero3", "ZeRO-3 (nbaccel)"),
    ("hand_zero3", "ZeRO-3 (hand-written DeepSpeed)"),
)


def summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians over the rounds, the ratios (of medians, and per round) and the bytes."""
    subjects = {
        s: {
            "label": SUBJECTS[s],
            "step_ms": harness.summarise([r["step_ms"] for r in results]),
            "mean_step_ms": statistics.median(r["mean_step_ms"] for r in results),
            "cpu_step_ms": harness.summarise([r["cpu_step_ms"] for r in results]),
        }
        for s, results in runs.items()
    }
    ratios = []
    for subject, versus, target in _RATIOS:
        pairs = zip(runs[subject], runs[versus], strict=True)
        a, b = subjects[subject], subjects[versus]
        ratio = a["step_ms"]["median"] / b["step_ms"]["median"]
        ratios.append(
            {
                "subject": subject,
                "versus": versus,
                "ratio": ratio,
                "paired": harness.summarise([x["step_ms"] / y["step_ms"] for x, y in pairs]),
                "cpu_ratio": a["cpu_step_ms"]["median"] / b["cpu_step_ms"]["median"],
                "at_most": target,
                "met": None if target is None else ratio <= target,
            }
        )
    ddp, zero3 = runs["nbaccel_ddp"][0]["memory"], runs["nbaccel_zero3"][0]["memory"]
    memory_ratio = zero3["bytes"] / ddp["bytes"]
    hand = runs["deepspeed_zero3"][0]["memory"]
    memory = {
        "ddp": ddp,
        "zero3": zero3,
        "hand_zero3": hand,
        "hand_ratio": hand["bytes"] / ddp["bytes"],
        "ratio": memory_ratio,
        "at_most": TARGETS["memory"],
        "met": memory_ratio <= TARGETS["memory"],
    }
    return {"subjects": subjects, "ratios": ratios, "memory": memory}


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f}"


def _time_table(payload: dict[str, Any]) -> list[str]:
    rows = [
        "| Subject | ms/step (median) | min - max | mean ms/step | CPU ms/step (both ranks) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for item in payload["subjects"].values():
        step, cpu = item["step_ms"], item["cpu_step_ms"]
        rows.append(
            f"| {item['label']} | {step['median']:.2f} | {step['min']:.2f} - {step['max']:.2f}"
            f" | {item['mean_step_ms']:.2f} | {cpu['median']:.2f} ({cpu['min']:.2f} - "
            f"{cpu['max']:.2f}) |"
        )
    rows += [
        "",
        "| Ratio (step time) | of medians | per round: median (min - max) | CPU time | target |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for r in payload["ratios"]:
        target = "-"
        if r["at_most"] is not None:
            target = f"at most {r['at_most']:.2f}x ({'met' if r['met'] else 'NOT met'})"
        paired = r["paired"]
        rows.append(
            f"| {SUBJECTS[r['subject']]} / {SUBJECTS[r['versus']]} | **{r['ratio']:.3f}x** | "
            f"{paired['median']:.3f}x ({paired['min']:.3f} - {paired['max']:.3f}) | "
            f"{r['cpu_ratio']:.3f}x | {target} |"
        )
    return rows


def _memory_table(payload: dict[str, Any]) -> list[str]:
    m = payload["memory"]
    rows = [
        "| Per rank | parameters MiB | gradients MiB | optimizer state MiB | total MiB |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for key, label in MEMORY_ROWS:
        if key not in m:  # a result file written before the hand-written row was kept
            continue
        p = m[key]
        rows.append(
            f"| {label} | {_mib(p['params'])} | {_mib(p['grads'])} | {_mib(p['optimizer'])} | "
            f"{_mib(p['bytes'])} |"
        )
    verdict = "met" if m["met"] else "NOT met"
    rows += ["", f"ZeRO-3 / DDP: **{m['ratio']:.3f}x** (at most {m['at_most']}x: {verdict})."]
    hand = m.get("hand_zero3", {})
    copy = hand.get("fp32_copy", 0)
    if copy:
        rows += [
            "",
            f"DeepSpeed driven by hand holds {_mib(copy)} MiB more per rank "
            f"(ZeRO-3 / DDP {m['hand_ratio']:.3f}x):",
            "the fp32 partitions its optimizer steps are a copy of the parameter shards although",
            "this run trains in fp32 (its `_create_fp32_partitions` means to share them when the",
            "dtype and device agree, but compares a `torch.device` with a device's name, so it",
            "never does). nbaccel's engine lets the optimizer step the shards themselves",
            "(`nbaccel.deepspeed.engine.share_master_partitions`); the losses stay equal.",
        ]
    return rows


def markdown(payload: dict[str, Any], command: str) -> str:
    """The docs section; ``command`` is the command line that gave its figures."""
    c = payload["config"]
    width, layers = c["width"], c["layers"]
    lines = [
        f"## DeepSpeed ZeRO on CPU (`{NAME}`)",
        "",
        "One MLP trained seven ways on the same data for the same steps, in fp32 on",
        f"{c['world']} CPU ranks (gloo, {c['threads']} torch thread(s) per rank):",
        f"{layers} x (Linear({width}, {width}) + ReLU), then Linear({width}, {c['classes']});",
        f"AdamW, cross-entropy, synthetic data, {c['batch']} samples per rank per step. The seven:",
        "ZeRO-2 and ZeRO-3 through nbaccel's",
        "`Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=N))` (`prepare(model,",
        "optimizer, loader)`, `accelerator.backward(loss)`; launched with `notebook_launcher`,",
        "fork); the same two driven by hand (`deepspeed.init_distributed`, `deepspeed.initialize`",
        "with the config the plugin fills in, `engine.backward(loss)`, `engine.step()`) under",
        "`python -m torch.distributed.run --nproc_per_node 2`, as a user runs it; the same two",
        "again with the malloc settings nbaccel's ranks fix for themselves, given through glibc's",
        "variables (`MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`: the Accelerator's own",
        'cost apart from the allocator\'s; docs/launcher.md, "Memory a rank frees"); and plain',
        "DDP through nbaccel's `Accelerator` without a plugin (clipping at 1.0 with",
        "`accelerator.clip_grad_norm_`, as DeepSpeed's config clips).",
        "",
        "One round is one nbaccel launch (ZeRO-2, ZeRO-3, DDP in turn) and two torchrun launches",
        "(ZeRO-2, ZeRO-3 in turn; plain, then with the malloc settings), their order rotating",
        "from round to round. In each,",
        "every subject builds its model, runs its untimed steps, then times its steps one by",
        "one, each from fetching its batch to the end of its optimizer step (a step's time is",
        "the slowest rank's; a round's figure is its median step). Process start-up and engine",
        f"building are not timed. {c['warmup']} untimed and {c['steps']} timed steps per subject;",
        f"{c['warmup_rounds']} uncounted warm-up round(s), then {c['reps']} counted rounds.",
        "Checked in every round:",
        "nbaccel's engine and the hand-written one have the same settings as DeepSpeed parsed",
        "them and reach the same losses, and nbaccel's holds the hand-written one's bytes less",
        "DeepSpeed's second fp32 copy of the shards (below); DDP's losses match too (the",
        "largest relative differences are in the JSON file).",
        "",
        *_time_table(payload),
        "",
        "Mean ms/step: the timed steps between two barriers, divided by their number. CPU",
        "ms/step: the CPU time of both ranks' processes (every thread) over the timed steps,",
        "divided by their number: a rank that waits, for its peer or for a core another program",
        "holds, spends none, so it moves less with the machine's load than wall time does",
        '("CPU time" in the ratios: of the medians).',
        "",
        "Bytes of parameters + gradients + optimizer state held per rank, counted from the",
        "tensors (not RSS) right after the last timed step, the largest rank's; memory that two",
        "tensors share (a view, an alias) counts once. DDP: every parameter, its gradient and",
        "AdamW's `exp_avg` / `exp_avg_sq`. ZeRO-3: each parameter's shard `p.ds_tensor` (plus",
        "`p.data` of the small parameters ZeRO-3 keeps whole), the gradient partitions",
        "(`grad_partitions_flat_buffer`), the ZeRO optimizer's inner AdamW state",
        "(`engine.optimizer.optimizer.state`) and the fp32 partitions it steps",
        "(`fp32_partitioned_groups_flat`). Communication buffers are not counted (DeepSpeed's",
        "reduce bucket, DDP's gradient buckets).",
        "",
        *_memory_table(payload),
        "",
        f"Every round (step times, losses, bytes) is in `benchmarks/results/{NAME}.json`.",
        "",
        harness.machine_markdown(payload["machine"], command),
        "",
        f"![{NAME}](img/{NAME}.png)",
    ]
    return "\n".join(lines) + "\n"


def verdicts(payload: dict[str, Any]) -> str:
    """The lines printed after the table: each target and whether it is met."""
    out = []
    for r in payload["ratios"]:
        line = f"{SUBJECTS[r['subject']]} / {SUBJECTS[r['versus']]} = {r['ratio']:.3f}x"
        line += f" (CPU time {r['cpu_ratio']:.3f}x)"
        if r["at_most"] is not None:
            line += f" ({'meets' if r['met'] else 'MISSES'} the {r['at_most']}x target)"
        out.append(line)
    m = payload["memory"]
    out.append(
        f"ZeRO-3 / DDP bytes per rank = {m['ratio']:.3f}x "
        f"({'meets' if m['met'] else 'MISSES'} the {m['at_most']}x target)"
    )
    return "\n".join(out)


def plot(payload: dict[str, Any]) -> Any:
    """Step times (median, min-max, every round) and the bytes per rank, stacked by part."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (step, mem) = plt.subplots(1, 2, figsize=(13, 4.6), dpi=120, width_ratios=[2.2, 1])
    items = list(payload["subjects"].values())
    med = [s["step_ms"]["median"] for s in items]
    err = [
        [m - s["step_ms"]["min"] for m, s in zip(med, items, strict=True)],
        [s["step_ms"]["max"] - m for m, s in zip(med, items, strict=True)],
    ]
    palette = {"nbaccel": "#1f77b4", "deepspeed": "#7f7f7f", "tuned": "#bcbd22"}
    colors = [palette[key.split("_")[0]] for key in payload["subjects"]]
    step.bar(range(len(items)), med, yerr=err, capsize=5, color=colors, alpha=0.85)
    for i, s in enumerate(items):
        values = s["step_ms"]["values"]
        step.scatter([i] * len(values), values, color="black", s=8, zorder=3)
    step.set_xticks(range(len(items)))
    ticks = [textwrap.fill(s["label"].replace(",", ""), 16) for s in items]
    step.set_xticklabels(ticks, fontsize=7)
    step.set_ylabel("ms per step (median; bars min-max; dots: rounds)", fontsize=9)
    m = payload["memory"]
    keys = [k for k in ("ddp", "zero3", "hand_zero3") if k in m]
    names = {"ddp": "DDP", "zero3": "ZeRO-3", "hand_zero3": "ZeRO-3\nby hand"}
    bottom = [0.0] * len(keys)
    for part, label in (("params", "parameters"), ("grads", "gradients"), ("optimizer", "AdamW")):
        values = [m[k][part] / 2**20 for k in keys]
        mem.bar([names[k] for k in keys], values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    mem.set_ylabel("MiB per rank", fontsize=9)
    mem.set_title(f"ZeRO-3 / DDP = {m['ratio']:.3f}x", fontsize=9)
    mem.legend(fontsize=8)
    for ax in (step, mem):
        ax.grid(axis="y", alpha=0.3)
    machine, c = payload["machine"], payload["config"]
    fig.suptitle(
        f"DeepSpeed ZeRO vs DDP, {c['world']} CPU ranks (gloo); {machine['cpu_model']}, "
        f"{machine['usable_cores']} cores, deepspeed {machine['versions']['deepspeed']}",
        fontsize=10,
    )
    return fig
