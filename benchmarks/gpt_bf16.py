"""The GPU half of the scaling picture: a GPT-style model trained in bf16 on one GPU, nbaccel's
Accelerator vs a hand-written ``torch.autocast`` loop; tokens/s and model FLOPs utilisation.

Each repetition runs in a fresh spawned process (its own CUDA context), so the parent never
initialises CUDA. Model FLOPs per token follow the usual estimate for a decoder-only
transformer: ``6 * N + 12 * layers * width * sequence`` (forward and backward; ``N`` counts
every parameter but the position embedding), and the utilisation divides the achieved FLOPs/s
by the GPU's dense bf16 peak (a small table of known GPUs, or ``--gpt_peak_tflops``).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from . import harness

__all__ = ["GPTConfig", "measure", "peak_tflops"]

SUBJECTS = {
    "hand_written": "hand-written torch.autocast bf16",
    "nbaccel": "nbaccel Accelerator bf16",
}
# Dense bf16 tensor-core peaks (TFLOP/s, no sparsity) from the vendors' data sheets.
_PEAKS = (
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("L4", 121.0),
    ("A10G", 70.0),
    ("A10", 125.0),
)


@dataclass(frozen=True)
class GPTConfig:
    """The model and the run (defaults: GPT-2 small's shape)."""

    layers: int = 12
    heads: int = 12
    width: int = 768
    sequence: int = 1024
    vocab: int = 50304
    batch_size: int = 8
    warmup_steps: int = 5
    steps: int = 20
    reps: int = 5
    device: str = "cuda"


class _Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.norm1 = nn.LayerNorm(config.width)
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.proj = nn.Linear(config.width, config.width)
        self.norm2 = nn.LayerNorm(config.width)
        self.mlp = nn.Sequential(
            nn.Linear(config.width, 4 * config.width),
            nn.GELU(approximate="tanh"),
            nn.Linear(4 * config.width, config.width),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """A decoder-only transformer; the output layer shares the token embedding's weights."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.tokens = nn.Embedding(config.vocab, config.width)
        self.positions = nn.Embedding(config.sequence, config.width)
        self.blocks = nn.ModuleList(_Block(config) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.vocab, bias=False)
        self.head.weight = self.tokens.weight
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def flops_per_token(model: GPT, config: GPTConfig) -> float:
    """Training FLOPs per token: ``6 * N + 12 * layers * width * sequence``."""
    params = sum(p.numel() for p in model.parameters()) - model.positions.weight.numel()
    return 6.0 * params + 12.0 * config.layers * config.width * config.sequence


def peak_tflops(device_name: str) -> float | None:
    """The dense bf16 peak of a known GPU, by name; ``None`` when it is not in the table."""
    for key, value in _PEAKS:
        if key in device_name:
            return value
    return None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _repetition(subject: str, config: GPTConfig) -> dict[str, Any]:
    """One repetition, in a fresh process: build, warm up, time ``config.steps`` steps."""
    torch.manual_seed(0)
    device = torch.device(config.device)
    model = GPT(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    generator = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(
        0, config.vocab, (config.batch_size, config.sequence + 1), generator=generator
    )
    inputs, targets = ids[:, :-1].to(device), ids[:, 1:].to(device)
    if subject == "nbaccel":
        from nbaccel import Accelerator

        accelerator = Accelerator(mixed_precision="bf16", cpu=device.type == "cpu")
        model, optimizer = accelerator.prepare(model, optimizer)

        def step() -> torch.Tensor:
            optimizer.zero_grad(set_to_none=True)
            loss = model(inputs, targets)
            accelerator.backward(loss)
            optimizer.step()
            return loss
    else:

        def step() -> torch.Tensor:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
                loss = model(inputs, targets)
            loss.backward()
            optimizer.step()
            return loss

    for _ in range(config.warmup_steps):
        step()
    _sync(device)
    started = time.perf_counter()
    for _ in range(config.steps):
        loss = step()
    _sync(device)
    seconds = time.perf_counter() - started
    inner = getattr(model, "module", model)
    return {
        "seconds": seconds,
        "tokens_per_s": config.steps * config.batch_size * config.sequence / seconds,
        "flops_per_token": flops_per_token(inner, config),
        "loss": float(loss.detach()),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
    }


def _in_fresh_process(subject: str, config: GPTConfig) -> dict[str, Any]:
    """Run :func:`_repetition` in a new interpreter (``python -m benchmarks.gpt_bf16``)."""
    import json
    import subprocess
    import sys

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
            f"{SUBJECTS[subject]}: the GPT repetition failed (exit status {done.returncode}):\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return dict(json.loads(lines[-1]))


def measure(config: GPTConfig, peak: float | None) -> dict[str, Any]:
    """Warm-up + ``config.reps`` repetitions per subject, alternating; the summary."""
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SUBJECTS}
    for rep in range(config.reps + 1):
        for subject in SUBJECTS:
            result = _in_fresh_process(subject, config)
            label = "warm-up" if rep == 0 else f"rep {rep}/{config.reps}"
            print(
                f"  gpt {label:<10} {SUBJECTS[subject]:<34} {result['tokens_per_s']:12,.0f} "
                f"tokens/s  loss {result['loss']:.3f}",
                flush=True,
            )
            if not math.isfinite(result["loss"]):
                raise RuntimeError(f"{SUBJECTS[subject]}: the loss is {result['loss']}")
            if rep:
                runs[subject].append(result)
    device = runs["nbaccel"][0]["device"]
    peak = peak if peak is not None else peak_tflops(device)
    base = statistics.median(r["tokens_per_s"] for r in runs["hand_written"])
    subjects: dict[str, Any] = {}
    for subject, results in runs.items():
        stats = harness.summarise([r["tokens_per_s"] for r in results])
        flops = results[0]["flops_per_token"] * stats["median"]
        subjects[subject] = {
            "label": SUBJECTS[subject],
            "tokens_per_s": stats,
            "ratio_to_hand_written": stats["median"] / base,
            "model_tflops_per_s": flops / 1e12,
            "mfu": None if peak is None else flops / (peak * 1e12),
        }
    return {
        "ran": True,
        "device": device,
        "peak_tflops": peak,
        "config": asdict(config),
        "subjects": subjects,
        "runs": runs,
    }


def markdown(gpu: dict[str, Any]) -> str:
    """The GPU part of the scaling section."""
    if not gpu.get("ran"):
        return f"**GPU, GPT-style model in bf16: not run** - {gpu['reason']}"
    c = gpu["config"]
    rows = [
        "| Subject | tokens/s median (min - max) | vs hand-written | model TFLOP/s | MFU |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for item in gpu["subjects"].values():
        s = item["tokens_per_s"]
        mfu = "n/a" if item["mfu"] is None else f"{100 * item['mfu']:.1f}%"
        rows.append(
            f"| {item['label']} | {s['median']:,.0f} ({s['min']:,.0f} - {s['max']:,.0f})"
            f" | **{item['ratio_to_hand_written']:.3f}x** | "
            f"{item['model_tflops_per_s']:.1f} | {mfu} |"
        )
    peak = gpu["peak_tflops"]
    peak_text = "unknown" if peak is None else f"{peak:g} TFLOP/s"
    setup = (
        f"{c['layers']} layers, width {c['width']}, {c['heads']} heads, sequence "
        f"{c['sequence']}, vocabulary {c['vocab']}, batch {c['batch_size']}, AdamW; "
        f"{c['steps']} timed steps after {c['warmup_steps']}, {c['reps']} repetitions per "
        "subject (a fresh process each, alternating) after one warm-up. MFU = model FLOPs/s "
        f"(6N + 12 x layers x width x sequence per token) / dense bf16 peak ({peak_text})."
    )
    title = f"### GPU: GPT-style model in bf16 on one {gpu['device']}"
    return "\n".join([title, "", setup, "", *rows])


if __name__ == "__main__":  # one repetition: SUBJECT CONFIG_JSON; prints the result as JSON
    import json
    import sys

    _result = _repetition(sys.argv[1], GPTConfig(**json.loads(sys.argv[2])))
    print(json.dumps(_result))
