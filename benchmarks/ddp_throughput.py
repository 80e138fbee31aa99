"""DDP training throughput on CPU (gloo): hand-written torch DDP vs nbaccel vs HF Accelerate."""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Subset, TensorDataset

from . import harness

__all__ = ["NAME", "SUBJECTS", "SUMMARY", "Config", "add_arguments", "run"]

NAME = "ddp_throughput"
SUMMARY = "samples/s of one MLP trained with DDP on 2 CPU ranks (gloo), three ways"
BASELINE = "torch_ddp"
SUBJECTS: dict[str, str] = {
    "torch_ddp": "hand-written torch DDP",
    "nbaccel": "nbaccel Accelerator",
    "accelerate": "HF Accelerate Accelerator",
}
TARGET_RATIO = 0.98


@dataclass(frozen=True)
class Config:
    """What one run measures; every subject gets the same.

    Attributes:
        world_size: ranks (processes) on this machine.
        batch_size: samples per rank per step.
        features: input width; also the width of every hidden layer.
        layers: hidden ``Linear(features, features) + ReLU`` layers.
        classes: outputs of the last layer.
        warmup_steps: steps run before the clock starts, in every repetition.
        steps: timed steps per repetition.
        reps: counted repetitions per subject (after one uncounted warm-up repetition).
        threads: torch threads per rank.
        seed: seeds the model and the data.
    """

    world_size: int = 2
    batch_size: int = 32
    features: int = 512
    layers: int = 3
    classes: int = 10
    warmup_steps: int = 20
    steps: int = 300
    reps: int = 5
    threads: int = 1
    seed: int = 0

    @property
    def samples_per_rank(self) -> int:
        """Samples each rank trains on in one repetition (warm-up steps included)."""
        return (self.warmup_steps + self.steps) * self.batch_size


# -- what every rank builds -----------------------------------------------------------------
def _build(config: Config) -> tuple[nn.Module, torch.optim.Optimizer, TensorDataset]:
    """The model, its optimizer and the synthetic data set, identical in every rank."""
    torch.manual_seed(config.seed)
    blocks: list[nn.Module] = []
    for _ in range(config.layers):
        blocks += [nn.Linear(config.features, config.features), nn.ReLU()]
    model = nn.Sequential(*blocks, nn.Linear(config.features, config.classes))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    generator = torch.Generator().manual_seed(config.seed + 1)
    total = config.samples_per_rank * config.world_size
    inputs = torch.randn(total, config.features, generator=generator)
    targets = torch.randint(0, config.classes, (total,), generator=generator)
    return model, optimizer, TensorDataset(inputs, targets)


@dataclass
class _Prepared:
    model: nn.Module
    optimizer: Any
    loader: Any
    backward: Callable[[torch.Tensor], None]


def _torch_ddp(
    model: nn.Module, optimizer: torch.optim.Optimizer, data: TensorDataset, config: Config
) -> _Prepared:
    """Plain torch: env:// process group, DDP, and this rank's batches sharded by hand."""
    dist.init_process_group("gloo")
    rank, world, size = dist.get_rank(), dist.get_world_size(), config.batch_size
    # global step k trains on samples [k*size*world, (k+1)*size*world), as the Accelerators do
    mine = [
        i
        for k in range(len(data) // (size * world))
        for i in range((k * world + rank) * size, (k * world + rank + 1) * size)
    ]
    loader = DataLoader(Subset(data, mine), batch_size=size)
    return _Prepared(nn.parallel.DistributedDataParallel(model), optimizer, loader, _backward)


def _backward(loss: torch.Tensor) -> None:
    loss.backward()


def _with_accelerator(package: str) -> Callable[..., _Prepared]:
    """The same code for nbaccel and for Accelerate: ``package.Accelerator(cpu=True)``,
    ``prepare()``, ``accelerator.backward()`` (the package is imported in the rank)."""

    def setup(model: nn.Module, optimizer: Any, data: TensorDataset, config: Config) -> _Prepared:
        accelerator = importlib.import_module(package).Accelerator(cpu=True)
        loader = DataLoader(data, batch_size=config.batch_size)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        return _Prepared(model, optimizer, loader, accelerator.backward)

    return setup


_SETUPS: dict[str, Callable[[nn.Module, Any, TensorDataset, Config], _Prepared]] = {
    "torch_ddp": _torch_ddp,
    "nbaccel": _with_accelerator("nbaccel"),
    "accelerate": _with_accelerator("accelerate"),
}


def _train(prepared: _Prepared, batches: Iterator[Any], steps: int) -> torch.Tensor:
    """``steps`` training steps, written the same way for every subject."""
    loss = torch.zeros(())
    for _ in range(steps):
        inputs, targets = next(batches)
        prepared.optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(prepared.model(inputs), targets)
        prepared.backward(loss)
        prepared.optimizer.step()
    return loss


def worker(local_rank: int, port: int, result_path: str, subject: str, config: Any) -> None:
    """One rank of one repetition: set up ``subject``, warm up, time ``config.steps`` steps
    (one process works too: ``scaling`` runs it at 1, 2 and 4)."""
    os.environ.update(harness.rank_environment(local_rank, config.world_size, port, config.threads))
    torch.set_num_threads(config.threads)
    model, optimizer, data = _build(config)
    prepared = _SETUPS[subject](model, optimizer, data, config)
    torch.set_num_threads(config.threads)  # whatever the subject did, every one runs alike
    if not dist.is_initialized():  # one process: nbaccel needs no group; the clock does
        dist.init_process_group("gloo")
    batches = iter(prepared.loader)
    _train(prepared, batches, config.warmup_steps)
    dist.barrier()
    start = time.perf_counter()
    loss = _train(prepared, batches, config.steps)
    dist.barrier()
    seconds = time.perf_counter() - start
    inner = getattr(prepared.model, "module", prepared.model)
    checksum = sum(float(p.detach().double().sum()) for p in inner.parameters())
    if dist.get_rank() == 0:
        harness.write_result(
            result_path,
            {
                "seconds": seconds,
                "samples": config.steps * config.batch_size * config.world_size,
                "threads": torch.get_num_threads(),
                "last_loss": float(loss.detach()),
                "checksum": checksum,
            },
        )
    dist.barrier()
    dist.destroy_process_group()
    harness.leave_rank()


# -- the parent: alternate subjects, summarise, report ----------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options."""
    defaults = Config()
    group = parser.add_argument_group(f"{NAME} options")
    group.add_argument("--reps", type=int, default=defaults.reps, help="counted repetitions")
    group.add_argument("--steps", type=int, default=defaults.steps, help="timed steps per rep")
    group.add_argument(
        "--warmup-steps", type=int, default=defaults.warmup_steps, help="untimed steps per rep"
    )
    group.add_argument(
        "--batch-size", type=int, default=defaults.batch_size, help="samples per rank per step"
    )


def _config(options: argparse.Namespace) -> Config:
    for name in ("reps", "steps", "batch_size"):
        if getattr(options, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1.")
    if options.warmup_steps < 1:
        raise SystemExit("--warmup-steps must be >= 1 (the first steps are never timed).")
    world_size = Config.world_size
    return Config(
        world_size=world_size,
        batch_size=options.batch_size,
        warmup_steps=options.warmup_steps,
        steps=options.steps,
        reps=options.reps,
        threads=harness.threads_per_process(world_size),
    )


def _repetition(subject: str, config: Config) -> dict[str, Any]:
    result = harness.launch_ranks(worker, (subject, config), config.world_size)
    if result["threads"] != config.threads:
        raise RuntimeError(f"{subject} ran with {result['threads']} threads, not {config.threads}.")
    result["samples_per_s"] = result["samples"] / result["seconds"]
    return result


def _measure(config: Config, subjects: list[str]) -> dict[str, list[dict[str, Any]]]:
    """One warm-up repetition, then ``config.reps`` rounds, subjects alternating a b c a b c."""
    runs: dict[str, list[dict[str, Any]]] = {subject: [] for subject in subjects}
    for rep in range(config.reps + 1):
        label = "warm-up" if rep == 0 else f"rep {rep}/{config.reps}"
        for subject in subjects:
            result = _repetition(subject, config)
            print(
                f"  {label:<10} {SUBJECTS[subject]:<27} {result['samples_per_s']:9.0f} samples/s",
                flush=True,
            )
            if rep > 0:
                runs[subject].append(result)
    return runs


def check_same_training(runs: dict[str, list[dict[str, Any]]]) -> None:
    """Every subject must have trained the same model on the same batches."""
    reference = runs[BASELINE][0]["checksum"]
    for subject, results in runs.items():
        for result in results:
            if abs(result["checksum"] - reference) > 1e-6 * max(1.0, abs(reference)):
                raise RuntimeError(
                    f"{SUBJECTS[subject]} ended with parameter sum {result['checksum']!r}, the "
                    f"hand-written loop with {reference!r}: they did not train alike."
                )


def _summary(runs: dict[str, list[dict[str, Any]]], config: Config) -> dict[str, Any]:
    base = runs[BASELINE]
    base_median = statistics.median(r["samples_per_s"] for r in base)
    subjects: dict[str, Any] = {}
    for subject, results in runs.items():
        rates = [r["samples_per_s"] for r in results]
        stats = harness.summarise(rates)
        pairs = zip(results, base, strict=True)
        paired = [r["samples_per_s"] / b["samples_per_s"] for r, b in pairs]
        subjects[subject] = {
            "label": SUBJECTS[subject],
            "samples_per_s": stats,
            "ms_per_step": statistics.median(1000 * r["seconds"] / config.steps for r in results),
            "ratio_to_torch_ddp": stats["median"] / base_median,
            "paired_ratio_to_torch_ddp": harness.summarise(paired),
            "last_loss": results[-1]["last_loss"],
        }
    return subjects


def _table(subjects: dict[str, Any]) -> str:
    rows = [
        "| Subject | samples/s (median) | min - max | ms/step | vs hand-written DDP"
        " | per-round ratio: median (min - max) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for item in subjects.values():
        rate, paired = item["samples_per_s"], item["paired_ratio_to_torch_ddp"]
        rows.append(
            f"| {item['label']} | {rate['median']:,.0f} | {rate['min']:,.0f} - {rate['max']:,.0f}"
            f" | {item['ms_per_step']:.2f} | **{item['ratio_to_torch_ddp']:.3f}x**"
            f" | {paired['median']:.3f}x ({paired['min']:.2f} - {paired['max']:.2f}) |"
        )
    return "\n".join(rows)


def _markdown(payload: dict[str, Any]) -> str:
    config, machine, subjects = payload["config"], payload["machine"], payload["subjects"]
    versions = machine["versions"]
    layers = f"{config['layers']} x Linear({config['features']}, {config['features']}) + ReLU"
    return f"""## DDP throughput on CPU (`ddp_throughput`)

The same training step three ways, on {config["world_size"]} ranks (gloo, one machine):
a hand-written loop (`torch.distributed` + `DistributedDataParallel`, batches sharded by hand),
nbaccel's `Accelerator(cpu=True)` and Hugging Face Accelerate's `Accelerator(cpu=True)`
(`prepare(model, optimizer, dataloader)`, `accelerator.backward(loss)`). Model: {layers}, then
Linear({config["features"]}, {config["classes"]}); SGD with momentum; cross-entropy; synthetic data;
{config["batch_size"]} samples per rank per step. Each repetition starts fresh processes
(forked the same way for every subject, `env://` on a fresh port, {config["threads"]} torch
thread(s) per rank), runs {config["warmup_steps"]} untimed steps, then times
{config["steps"]} steps between two barriers. After one uncounted warm-up repetition per
subject, {config["reps"]} repetitions per subject ran alternately (a b c a b c ...). Every
subject ends with the same parameters (checked). Target: nbaccel >= {TARGET_RATIO}x the
hand-written loop.

{_table(subjects)}

"vs hand-written DDP" = median / median of the hand-written loop; "per-round ratio" divides
each repetition by the hand-written repetition of the same round (a, b, c ran back to back),
which cancels slow drifts of the machine. Every repetition is in
`benchmarks/results/{NAME}.json`.

Machine: {machine["cpu_model"]}, {machine["usable_cores"]} cores, {machine["memory_gib"]} GiB;
{machine["os"]}; Python {machine["python"]}; torch {versions["torch"]}, nbaccel
{versions["nbaccel"]} ({machine["nbaccel_commit"]}), accelerate {versions["accelerate"]};
{machine["date"]}; load average (1, 5, 15 min) {machine["load_average_at_start"]} at the start,
{machine["load_average_at_end"]} at the end (other work on the machine shows up as noise).
Command: `python -m benchmarks {NAME}`.

![ddp_throughput](img/{NAME}.png)
"""


def _plot(payload: dict[str, Any], path: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    subjects = list(payload["subjects"].values())
    labels = [s["label"] for s in subjects]
    medians = [s["samples_per_s"]["median"] for s in subjects]
    low = [m - s["samples_per_s"]["min"] for m, s in zip(medians, subjects, strict=True)]
    high = [s["samples_per_s"]["max"] - m for m, s in zip(medians, subjects, strict=True)]
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=120)
    colors = ["#7f7f7f", "#1f77b4", "#ff7f0e"]
    ax.bar(labels, medians, color=colors, yerr=[low, high], capsize=6, alpha=0.85)
    for i, item in enumerate(subjects):
        values = item["samples_per_s"]["values"]
        ax.scatter([i] * len(values), values, color="black", s=10, zorder=3)
        ax.annotate(
            f"{item['ratio_to_torch_ddp']:.3f}x",
            (i, item["samples_per_s"]["max"]),
            textcoords="offset points",
            xytext=(0, 8),
            ha="center",
            fontsize=10,
        )
    machine, config = payload["machine"], payload["config"]
    ax.set_ylabel("samples/s (median; bars min-max; dots: repetitions)")
    ax.set_ylim(0, max(s["samples_per_s"]["max"] for s in subjects) * 1.15)
    ax.set_title(
        f"DDP throughput, {config['world_size']} CPU ranks (gloo), "
        f"{config['reps']} reps x {config['steps']} steps\n{machine['cpu_model']}, "
        f"{machine['usable_cores']} cores, torch {machine['versions']['torch']}",
        fontsize=10,
    )
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def run(options: argparse.Namespace) -> None:
    """Measure, print the table, and (unless ``--no-write``) write JSON, docs and plot."""
    versions = harness.require_subjects(options, ("torch", "nbaccel"), ("accelerate", "matplotlib"))
    subjects = [s for s in SUBJECTS if s != "accelerate" or not getattr(options, "no_peers", False)]
    config = _config(options)
    print(
        f"{NAME}: {len(subjects)} subjects x ({config.reps} + 1 warm-up) reps, "
        f"{config.steps} timed steps each, {config.world_size} ranks x {config.threads} "
        "thread(s)",
        flush=True,
    )
    machine = harness.machine_description(versions)
    runs = _measure(config, subjects)
    check_same_training(runs)
    machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    payload: dict[str, Any] = {
        "benchmark": NAME,
        "machine": machine,
        "config": asdict(config),
        "subjects": _summary(runs, config),
        "runs": runs,
    }
    print(_table(payload["subjects"]))
    ratio = payload["subjects"]["nbaccel"]["ratio_to_torch_ddp"]
    verdict = "meets" if ratio >= TARGET_RATIO else "MISSES"
    print(f"nbaccel / hand-written DDP = {ratio:.3f}x ({verdict} the {TARGET_RATIO}x target)")
    if options.no_write:
        return
    json_path = harness.write_json(NAME, payload)
    plot_path = harness.IMG_DIR / f"{NAME}.png"
    _plot(payload, plot_path)
    docs_path = harness.update_docs_section(NAME, _markdown(payload))
    print(f"wrote {json_path}, {plot_path}, {docs_path}")
