"""The "targets at a glance" section of docs/benchmarks.md, rebuilt from the JSON results that
are there (``benchmarks/results/*.json``) after every run that writes: each target, the
measured ratio, whether it is met, and the date of the run it comes from."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from . import harness

__all__ = ["NAME", "markdown", "update"]

NAME = "summary"
Row = tuple[str, str, str, bool | None]  # what, measured, target, met (None: no target)


def _ddp_throughput(data: dict[str, Any]) -> Iterator[Row]:
    for subject, item in data["subjects"].items():
        if subject != "torch_ddp":
            target = subject == "nbaccel"
            ratio = item["ratio_to_torch_ddp"]
            yield (
                f"training throughput, {item['label']} / hand-written DDP (2 CPU ranks)",
                f"{ratio:.3f}x",
                ">= 0.98x" if target else "-",
                ratio >= 0.98 if target else None,
            )


def _launch_latency(data: dict[str, Any]) -> Iterator[Row]:
    for v in data["verdicts"]:
        yield (
            f"launch latency ({v['variant']}, {v['processes']} processes), {v['subject']} / "
            f"{v['versus']}",
            f"{v['ratio']:.2f}x",
            f"<= {v['at_most']}x",
            bool(v["met"]),
        )


def _collectives(data: dict[str, Any]) -> Iterator[Row]:
    for subject, item in data["subjects"].items():
        if subject != "nbaccel":
            for key, what in (
                ("pad_s", "pad_across_processes"),
                ("gather_s", "gather_for_metrics"),
            ):
                yield (
                    f"{what} time, {item['label']} / nbaccel (< 1: Accelerate faster)",
                    f"{item[key + '_vs_nbaccel']:.2f}x",
                    "-",
                    None,
                )


def _scaling(data: dict[str, Any]) -> Iterator[Row]:
    for world, by_world in data["cpu"].items():
        item = by_world["subjects"].get("nbaccel")
        if item:
            yield (
                f"CPU samples/s at {world} processes, nbaccel / hand-written DDP",
                f"{item['ratio_to_hand_written']:.3f}x",
                "-",
                None,
            )


def _gpt_bf16(data: dict[str, Any]) -> Iterator[Row]:
    gpu = data["gpu"]
    if not gpu.get("ran"):
        yield ("GPT bf16 on a GPU", "not run: " + str(gpu.get("reason", "no GPU")), "-", None)
        return
    item = gpu["subjects"]["nbaccel"]
    ratio = item["step_vs_hand_written"]
    yield (
        f"GPT bf16 step time on {gpu['device']}, nbaccel / hand-written autocast",
        f"{ratio:.4f}x",
        "<= 1.02x",
        ratio <= 1.02,
    )
    if "step_vs_accelerate" in item:
        ratio = item["step_vs_accelerate"]
        yield (
            f"GPT bf16 step time on {gpu['device']}, nbaccel / Accelerate",
            f"{ratio:.4f}x",
            "<= 1.0x",
            ratio <= 1.0,
        )
    if item["mfu"] is not None:
        yield (
            f"GPT bf16 model FLOPs utilisation on {gpu['device']}, nbaccel",
            f"{100 * item['mfu']:.1f}%",
            ">= 40%",
            item["mfu"] >= 0.4,
        )


def _fsdp_memory(data: dict[str, Any]) -> Iterator[Row]:
    for world, r in data["results"].items():
        yield (
            f"FSDP FULL_SHARD / DDP bytes per process, {world} processes",
            f"{r['memory_ratio']:.3f}x",
            f"<= {r['target']:.2f}x",
            bool(r["met"]),
        )
        yield (f"FSDP / DDP time per step, {world} processes", f"{r['time_ratio']:.2f}x", "-", None)


def _deepspeed(data: dict[str, Any]) -> Iterator[Row]:
    labels = {s: item["label"] for s, item in data["subjects"].items()}
    for r in data["ratios"]:
        target = r["at_most"]
        yield (
            f"step time, {labels[r['subject']]} / {labels[r['versus']]} (2 CPU ranks)",
            f"{r['ratio']:.3f}x",
            "-" if target is None else f"<= {target}x",
            None if target is None else bool(r["met"]),
        )
    m = data["memory"]
    yield (
        "DeepSpeed ZeRO-3 / DDP bytes per rank (params + grads + optimizer state), 2 ranks",
        f"{m['ratio']:.3f}x",
        f"<= {m['at_most']}x",
        bool(m["met"]),
    )


_CHECKPOINT_KINDS = {
    "save_flushed": "save (Accelerate's files fsynced too)",
    "save_buffered": "save (vs a buffered write)",
}


def _checkpoint(data: dict[str, Any]) -> Iterator[Row]:
    for key, value in data["ratios"]["vs_accelerate"].items():
        kind = _CHECKPOINT_KINDS.get(key, key)
        yield (f"checkpoint {kind} speed, nbaccel / Accelerate", f"{value:.2f}x", "-", None)
    for key, value in data["ratios"]["vs_disk"].items():
        kind = "save (vs a write with fsync)" if key == "save" else _CHECKPOINT_KINDS.get(key, key)
        yield (
            f"checkpoint {kind} speed, nbaccel / the disk",
            f"{value:.2f}",
            ">= 0.5",
            value >= 0.5,
        )


def _pool(data: dict[str, Any]) -> Iterator[Row]:
    for v in data["verdicts"]:
        yield (
            f"pool round trip, {v['subject']} / {v['versus']} (2 CPU processes)",
            f"{v['ratio']:.3f}x",
            f"<= {v['at_most']}x",
            bool(v["met"]),
        )


def _where_overhead(data: dict[str, Any]) -> Iterator[Row]:
    ratio = data["summary"]["ratio_on_to_off"]
    yield (
        "DDP throughput with the watch over the ranks on / off (2 CPU ranks)",
        f"{ratio:.3f}x",
        ">= 0.99x",
        ratio >= 0.99,
    )


_READERS: dict[str, Callable[[dict[str, Any]], Iterator[Row]]] = {
    "ddp_throughput": _ddp_throughput,
    "launch_latency": _launch_latency,
    "collectives": _collectives,
    "scaling": _scaling,
    "fsdp_memory": _fsdp_memory,
    "deepspeed": _deepspeed,
    "gpt_bf16": _gpt_bf16,
    "checkpoint": _checkpoint,
    "pool": _pool,
    "where_overhead": _where_overhead,
}


def markdown() -> str:
    """The section, from whatever results are there."""
    lines = [
        "## Targets at a glance",
        "",
        "Rebuilt from `benchmarks/results/*.json` after every run that writes; each row names",
        "the run it comes from (read the sections below for spreads and conditions).",
        "",
        "| Benchmark (run) | What | Measured | Target | Met |",
        "| --- | --- | ---: | ---: | :---: |",
    ]
    for name, reader in _READERS.items():
        path = harness.RESULTS_DIR / f"{name}.json"
        if not path.exists():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            rows = list(reader(data))
            when = data.get("machine", {}).get("date", "?")[:16]
        except (KeyError, TypeError, ValueError) as exc:  # an older or newer results layout
            lines.append(f"| {name} | (results not readable here: {exc!r}) | | | |")
            continue
        for what, measured, target, met in rows:
            mark = "-" if met is None else ("yes" if met else "**no**")
            lines.append(f"| {name} ({when}) | {what} | {measured} | {target} | {mark} |")
    return "\n".join(lines)


def update() -> None:
    """Rewrite the section in docs/benchmarks.md."""
    harness.update_docs_section(NAME, markdown())
