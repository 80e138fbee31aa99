"""A GPT-style model trained in bf16 on one GPU: nbaccel's Accelerator against the hand-written
``torch.autocast`` loop and against Accelerate's Accelerator; step time, tokens/s and model FLOPs
utilisation (``benchmarks/gpt_model.py`` has the model and the FLOPs estimate).

Each repetition runs in a fresh process (its own CUDA context; the parent never initialises
CUDA), subjects alternating, every process warming up before its timed steps. Every subject
builds the same model from the same seed on the device, trains on the same batch with fused
AdamW, and must reach the same first loss. The hand-written process also times the forward and
backward passes and the optimizer step apart, which says where a step's time goes.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

import torch

from . import harness
from .gpt_model import GPT, GPTConfig, flops_per_token, peak_tflops

__all__ = ["NAME", "SUMMARY", "add_arguments", "markdown", "measure", "run"]

NAME = "gpt_bf16"
SUMMARY = "GPT-style model in bf16 on one GPU: nbaccel vs hand-written autocast vs Accelerate"
SUBJECTS = {
    "hand_written": "hand-written torch.autocast bf16",
    "nbaccel": "nbaccel Accelerator bf16",
    "nbaccel_plugin": "nbaccel Accelerator bf16, TorchDynamoPlugin",
    "accelerate": "Accelerate Accelerator bf16",
}
# compiled (--gpt_compile): the hand-written loop calls torch.compile(model); the Accelerators
# get dynamo_backend="inductor" (nbaccel also as TorchDynamoPlugin(backend="inductor"))
COMPILED_SUBJECTS = ("hand_written", "nbaccel", "nbaccel_plugin", "accelerate")
BASELINE = "hand_written"
_TINY: dict[str, Any] = {
    "layers": 2,
    "heads": 2,
    "width": 64,
    "sequence": 64,
    "vocab": 512,
    "batch_size": 2,
}


# -- options -----------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options (defaults: :class:`GPTConfig`'s)."""
    group = parser.add_argument_group(NAME)
    for name, what in (
        ("layers", "transformer blocks"),
        ("heads", "attention heads"),
        ("width", "model width"),
        ("sequence", "tokens per sequence"),
        ("batch", "sequences per step"),
        ("steps", "timed steps per repetition"),
        ("reps", "repetitions per subject"),
    ):
        group.add_argument(f"--gpt_{name}", type=int, default=None, help=what)
    group.add_argument(
        "--gpt_peak_tflops", type=float, default=None, help="dense bf16 peak for the MFU"
    )
    group.add_argument(
        "--gpt_compile",
        action="store_true",
        help="every subject compiled with inductor (results: gpt_bf16_compiled)",
    )
    group.add_argument(
        "--gpt_device", default=None, help=argparse.SUPPRESS
    )  # development only: run on another device (e.g. a tiny model on "cpu")


def _config(options: argparse.Namespace, device: str) -> GPTConfig:
    base = GPTConfig(device=device)
    if getattr(options, "quick", False) or device != "cuda":
        base = replace(base, **_TINY, warmup_steps=1, steps=3, reps=1)
    given = {
        "layers": options.gpt_layers,
        "heads": options.gpt_heads,
        "width": options.gpt_width,
        "sequence": options.gpt_sequence,
        "batch_size": options.gpt_batch,
        "steps": options.gpt_steps,
        "reps": options.gpt_reps,
    }
    base = replace(base, compiled=bool(getattr(options, "gpt_compile", False)))
    return replace(base, **{k: v for k, v in given.items() if v is not None})


def label(subject: str, config: GPTConfig) -> str:
    """The subject's name in tables, with ``+ inductor`` when compiled."""
    return SUBJECTS[subject] + (" + inductor" if config.compiled else "")


# -- one repetition, in its own process --------------------------------------------------------
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(device: torch.device, count: int, body: Callable[[], Any]) -> float:
    """Seconds for ``count`` calls of ``body``, the device drained before and after."""
    _sync(device)
    started = time.perf_counter()
    for _ in range(count):
        body()
    _sync(device)
    return time.perf_counter() - started


def _step_function(
    subject: str, config: GPTConfig, device: torch.device
) -> tuple[Any, Any, Callable[[], torch.Tensor]]:
    """The model, the optimizer and one training step of ``subject`` on one fixed batch."""
    torch.manual_seed(0)
    with device:
        model: Any = GPT(config)
    optimizer: Any = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=device.type == "cuda")
    ids = torch.randint(
        0,
        config.vocab,
        (config.batch_size, config.sequence + 1),
        generator=torch.Generator().manual_seed(1),
    )
    inputs, targets = ids[:, :-1].to(device), ids[:, 1:].to(device)
    if subject == "hand_written":
        if config.compiled:
            model = torch.compile(model)

        def step() -> torch.Tensor:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
                loss = model(inputs, targets)
            loss.backward()
            optimizer.step()
            return loss

        return model, optimizer, step
    if subject.startswith("nbaccel"):
        from nbaccel import Accelerator  # imported by the subject that measures it only
        from nbaccel.utils import TorchDynamoPlugin
    else:
        from accelerate import Accelerator  # type: ignore[no-redef]  # the peer, when measured
        from accelerate.utils import TorchDynamoPlugin  # type: ignore[no-redef]

    compiling: dict[str, Any] = {}
    if config.compiled and subject == "nbaccel_plugin":
        compiling["dynamo_plugin"] = TorchDynamoPlugin(backend="inductor")
    elif config.compiled:
        compiling["dynamo_backend"] = "inductor"
    accelerator = Accelerator(mixed_precision="bf16", cpu=device.type == "cpu", **compiling)
    model, optimizer = accelerator.prepare(model, optimizer)

    def accelerated_step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = model(inputs, targets)
        accelerator.backward(loss)
        optimizer.step()
        return loss

    return model, optimizer, accelerated_step


def _breakdown(
    model: Any, optimizer: Any, config: GPTConfig, device: torch.device
) -> dict[str, float]:
    """Seconds per step of the forward and backward passes alone and of the optimizer alone
    (the hand-written loop's parts, timed after its timed steps)."""
    ids = torch.randint(0, config.vocab, (config.batch_size, config.sequence + 1), device=device)

    def forward_backward() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()

    count = max(2, config.steps // 2)
    return {
        "forward_backward_s": _timed(device, count, forward_backward) / count,
        "optimizer_s": _timed(device, count, optimizer.step) / count,
    }


def _repetition(subject: str, config: GPTConfig) -> dict[str, Any]:
    """Build, warm up, time ``config.steps`` steps; what the parent needs (the first step's
    time apart: with ``compiled`` it holds the compilation)."""
    device = torch.device(config.device)
    firsts: list[float] = []
    model, optimizer, step = _step_function(subject, config, device)
    first_step_s = _timed(device, 1, lambda: firsts.append(float(step().detach())))
    first = firsts[0]
    for _ in range(max(0, config.warmup_steps - 1)):
        step()
    losses: list[torch.Tensor] = []
    seconds = _timed(device, config.steps, lambda: losses.append(step().detach()))
    inner = getattr(model, "module", model)
    result: dict[str, Any] = {
        "seconds": seconds,
        "step_s": seconds / config.steps,
        "tokens_per_s": config.steps * config.batch_size * config.sequence / seconds,
        "flops_per_token": flops_per_token(inner, config),
        "parameters": sum(p.numel() for p in inner.parameters()),
        "first_loss": first,
        "first_step_s": first_step_s,
        "loss": float(losses[-1]),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    if device.type == "cuda":
        result["max_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    if subject == BASELINE:
        result["breakdown"] = _breakdown(inner, optimizer, config, device)
    return result


def _in_fresh_process(subject: str, config: GPTConfig) -> dict[str, Any]:
    """Run :func:`_repetition` in a new interpreter (``python -m benchmarks.gpt_bf16``)."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpt_bf16", subject, json.dumps(asdict(config))],
        cwd=harness.ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(
            f"{label(subject, config)}: the GPT repetition failed (exit status "
            f"{done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return dict(json.loads(lines[-1]))


# -- the benchmark -----------------------------------------------------------------------------
def measure(config: GPTConfig, peak: float | None, subjects: tuple[str, ...]) -> dict[str, Any]:
    """``config.reps`` repetitions per subject, alternating; the summary."""
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in subjects}
    for rep in range(1, config.reps + 1):
        for subject in subjects:
            result = _in_fresh_process(subject, config)
            print(
                f"  gpt rep {rep}/{config.reps} {label(subject, config):<56} "
                f"{1000 * result['step_s']:8.1f} ms/step {result['tokens_per_s']:10,.0f} "
                f"tokens/s  loss {result['first_loss']:.4f} -> {result['loss']:.4f}",
                flush=True,
            )
            if not math.isfinite(result["loss"]):
                raise RuntimeError(f"{label(subject, config)}: the loss is {result['loss']}")
            runs[subject].append(result)
    firsts = {s: r[0]["first_loss"] for s, r in runs.items()}
    if max(firsts.values()) - min(firsts.values()) > 1e-2 * max(firsts.values()):
        raise RuntimeError(f"the subjects did not train the same model: first losses {firsts}")
    first = runs[subjects[0]][0]
    peak = peak if peak is not None else peak_tflops(first["device"])
    base_step = statistics.median(r["step_s"] for r in runs[BASELINE])
    summary: dict[str, Any] = {}
    for subject, results in runs.items():
        tokens = harness.summarise([r["tokens_per_s"] for r in results])
        step = statistics.median(r["step_s"] for r in results)
        flops = results[0]["flops_per_token"] * tokens["median"]
        summary[subject] = {
            "label": label(subject, config),
            "first_step_s": statistics.median(r["first_step_s"] for r in results),
            "tokens_per_s": tokens,
            "step_s": harness.summarise([r["step_s"] for r in results]),
            "step_vs_hand_written": step / base_step,
            "model_tflops_per_s": flops / 1e12,
            "mfu": None if peak is None else flops / (peak * 1e12),
            "max_memory_gib": max(r.get("max_memory_gib", 0.0) for r in results),
        }
    if "accelerate" in summary:
        accelerate_step = summary["accelerate"]["step_s"]["median"]
        for item in summary.values():
            item["step_vs_accelerate"] = item["step_s"]["median"] / accelerate_step
    parts = [r["breakdown"] for r in runs[BASELINE]]
    return {
        "ran": True,
        "device": first["device"],
        "torch": first["torch"],
        "cuda": first["cuda"],
        "parameters": first["parameters"],
        "peak_tflops": peak,
        "config": asdict(config),
        "subjects": summary,
        "breakdown": {k: statistics.median(p[k] for p in parts) for k in parts[0]},
        "runs": runs,
    }


def markdown(result: dict[str, Any], machine: dict[str, Any] | None = None) -> str:
    """This benchmark's section of docs/benchmarks.md."""
    if not result.get("ran"):
        return f"## GPT bf16 on one GPU (`{NAME}`)\n\nNot run: {result['reason']}"
    c = result["config"]
    compiled = bool(c.get("compiled"))
    rows = [
        "| Subject | ms/step median (min - max) | vs hand-written | vs Accelerate | tokens/s | "
        "model TFLOP/s | MFU | peak memory | first step (compiling) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for item in result["subjects"].values():
        s = item["step_s"]
        mfu = "n/a" if item["mfu"] is None else f"{100 * item['mfu']:.1f}%"
        versus = item.get("step_vs_accelerate")
        rows.append(
            f"| {item['label']} | {1000 * s['median']:.1f} ({1000 * s['min']:.1f} - "
            f"{1000 * s['max']:.1f}) | **{item['step_vs_hand_written']:.3f}x** | "
            + ("-" if versus is None else f"**{versus:.3f}x**")
            + f" | {item['tokens_per_s']['median']:,.0f} | {item['model_tflops_per_s']:.1f} | "
            f"{mfu} | {item['max_memory_gib']:.1f} GiB | {item.get('first_step_s', 0.0):.1f} s |"
        )
    peak = result["peak_tflops"]
    peak_text = "unknown" if peak is None else f"{peak:g} TFLOP/s"
    parts = result["breakdown"]
    title = f"## GPT bf16 compiled on one GPU (`{NAME} --gpt_compile`)" if compiled else None
    how = (
        "Compiled with inductor: the hand-written loop calls `torch.compile(model)`, the "
        'Accelerators get `dynamo_backend="inductor"` (nbaccel also as '
        '`TorchDynamoPlugin(backend="inductor")`); the first step, which compiles, is timed '
        "apart and not in the step times."
        if compiled
        else ""
    )
    lines = [
        title or f"## GPT bf16 on one GPU (`{NAME}`)",
        "",
        f"One {result['device']}, torch {result['torch']}, CUDA {result['cuda']}. A GPT-style "
        f"model of {result['parameters'] / 1e9:.2f} billion parameters ({c['layers']} layers, "
        f"width {c['width']}, {c['heads']} heads, sequence {c['sequence']}, vocabulary "
        f"{c['vocab']}, tied embeddings), {c['batch_size']} sequences per step, fused AdamW, "
        f"bf16 autocast; {c['steps']} timed steps after {c['warmup_steps']} warm-up steps, "
        f"{c['reps']} repetitions per subject (a fresh process each, alternating). Step time "
        "ratios are of medians (below 1: faster). MFU = model FLOPs/s (6N + 12 x layers x "
        f"width x sequence per token) / dense bf16 peak ({peak_text}). {how}".rstrip(),
        "",
        *rows,
        "",
        f"Where the hand-written step's time goes: forward and backward "
        f"{1000 * parts['forward_backward_s']:.1f} ms, optimizer "
        f"{1000 * parts['optimizer_s']:.1f} ms (medians, timed apart).",
    ]
    if machine is not None:
        name = f"{NAME}_compiled" if compiled else NAME
        command = f"python -m benchmarks {NAME}" + (" --gpt_compile" if compiled else "")
        lines += ["", f"Every repetition is in `benchmarks/results/{name}.json`.", ""]
        lines.append(harness.machine_markdown(machine, command))
        lines += ["", f"![{name}](img/{name}.png)"]
    return "\n".join(lines)


def _plot(payload: dict[str, Any]) -> Any:
    import matplotlib  # the plot's library, from the bench extra

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after choosing the headless backend

    subjects = payload["gpu"]["subjects"]
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=120)
    labels = [item["label"] for item in subjects.values()]
    medians = [1000 * item["step_s"]["median"] for item in subjects.values()]
    spread = [
        [m - 1000 * i["step_s"]["min"] for m, i in zip(medians, subjects.values(), strict=True)],
        [1000 * i["step_s"]["max"] - m for m, i in zip(medians, subjects.values(), strict=True)],
    ]
    palette = {"hand_written": "#777", "nbaccel": "#1565c0", "nbaccel_plugin": "#42a5f5"}
    colors = [palette.get(key, "#ef6c00") for key in subjects]
    ax.barh(labels, medians, xerr=spread, capsize=4, color=colors)
    ax.set_xlabel("ms per training step (median; bars min-max)")
    ax.set_title(f"GPT bf16, {payload['gpu']['device']}", fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    return fig


def run(options: argparse.Namespace) -> None:
    """Measure, print, and (unless --no-write) write JSON, docs section and plot."""
    started = time.monotonic()
    peers = () if getattr(options, "no_peers", False) else ("accelerate",)
    versions = harness.require_subjects(options, ("torch", "nbaccel"), ("accelerate",))
    device = options.gpt_device or "cuda"
    machine = harness.machine_description(versions)
    if device == "cuda" and not torch.cuda.is_available():
        reason = (
            "no CUDA GPU was found on this machine (torch.cuda.is_available() is False, "
            f"torch {torch.__version__})"
        )
        print(f"{NAME}: NOT RUN: {reason}", flush=True)
        print(markdown({"ran": False, "reason": reason}))
        return
    config = _config(options, device)
    ours = ("nbaccel", "nbaccel_plugin") if config.compiled else ("nbaccel",)
    subjects = (BASELINE, *ours, *peers)
    print(f"{NAME}: {[label(s, config) for s in subjects]}", flush=True)
    result = measure(config, options.gpt_peak_tflops, subjects)
    name = f"{NAME}_compiled" if config.compiled else NAME
    payload: dict[str, Any] = {
        "benchmark": name,
        "machine": harness.finish_machine(machine, started),
    }
    payload["gpu"] = result
    harness.publish(options, name, payload, markdown(result, payload["machine"]), _plot)


if __name__ == "__main__":  # one repetition: SUBJECT CONFIG_JSON; prints the result as JSON
    print(json.dumps(_repetition(sys.argv[1], GPTConfig(**json.loads(sys.argv[2])))))
