"""Collectives on an evaluation set: ``pad_across_processes`` and ``gather_for_metrics``,
nbaccel's Accelerator vs Hugging Face Accelerate's, on CPU ranks (gloo).

Every rank evaluates the same synthetic set of variable-length sequences through a prepared
DataLoader (``Accelerator(cpu=True).prepare``; each batch padded to its own longest sequence,
so ranks hold different lengths), and for each batch pads its predictions across processes
along the sequence dimension and gathers them for metrics. The set's size is not a multiple of
the ranks times the batch, so the last batch is evened out and ``gather_for_metrics`` must drop
the duplicates; rank 0 checks that exactly the whole set, with the right values, came back.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

from . import harness

__all__ = ["NAME", "SUBJECTS", "SUMMARY", "Config", "add_arguments", "run"]

NAME = "collectives"
SUMMARY = "pad_across_processes + gather_for_metrics over an uneven evaluation set, vs Accelerate"
SUBJECTS = {"nbaccel": "nbaccel Accelerator", "accelerate": "HF Accelerate Accelerator"}
BASELINE = "nbaccel"


@dataclass(frozen=True)
class Config:
    """What one run measures.

    Attributes:
        world_size: ranks.
        samples: sequences in the evaluation set (deliberately not a multiple of the ranks).
        batch_size: sequences per rank per batch.
        min_length, max_length: sequence lengths are drawn uniformly from this range.
        hidden: values per position in the predictions (a batch is ``(batch, length, hidden)``).
        reps: counted repetitions per subject, after one uncounted warm-up repetition.
        seed: seeds the data.
    """

    world_size: int = 2
    samples: int = 40_001
    batch_size: int = 64
    min_length: int = 8
    max_length: int = 64
    hidden: int = 16
    reps: int = 5
    seed: int = 0


class _Sequences(Dataset[torch.Tensor]):
    """Integer sequences of varied lengths, the same in every rank."""

    def __init__(self, config: Config) -> None:
        generator = torch.Generator().manual_seed(config.seed)
        self.lengths = torch.randint(
            config.min_length, config.max_length + 1, (config.samples,), generator=generator
        )
        self.starts = torch.cumsum(self.lengths, 0) - self.lengths
        self.tokens = torch.randint(0, 1000, (int(self.lengths.sum()),), generator=generator)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> torch.Tensor:
        start = int(self.starts[index])
        return self.tokens[start : start + int(self.lengths[index])]


def _collate(items: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(t) for t in items])
    return torch.nn.utils.rnn.pad_sequence(items, batch_first=True), lengths


def _accelerator(subject: str) -> Any:
    library = importlib.import_module("nbaccel" if subject == "nbaccel" else "accelerate")
    return library.Accelerator(cpu=True)


_COLLECTIVES = (
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "all_gather_object",
    "all_reduce",
    "broadcast",
    "broadcast_object_list",
    "gather",
    "scatter",
)


_COUNTED = {0: "", 8: "_steady"}  # batches whose collectives are counted: the first, the ninth


@contextlib.contextmanager
def _counting(counts: dict[str, int], key: str, enabled: bool) -> Iterator[None]:
    """Count the ``torch.distributed`` collectives run inside (on the batches in _COUNTED)."""
    if not enabled:
        yield
        return
    originals = {name: getattr(dist, name) for name in _COLLECTIVES if hasattr(dist, name)}

    def counted(function: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            counts[key] = counts.get(key, 0) + 1
            return function(*args, **kwargs)

        return call

    for name, function in originals.items():
        setattr(dist, name, counted(function))
    try:
        yield
    finally:
        for name, function in originals.items():
            setattr(dist, name, function)


def _worker(local_rank: int, port: int, result_path: str, subject: str, config: Config) -> None:
    """One rank of one repetition: evaluate the set, timing each collective call."""
    os.environ.update(harness.rank_environment(local_rank, config.world_size, port, 1))
    torch.set_num_threads(1)
    data = _Sequences(config)
    accelerator = _accelerator(subject)
    loader = accelerator.prepare(
        DataLoader(data, batch_size=config.batch_size, collate_fn=_collate)
    )
    scale = torch.arange(1, config.hidden + 1, dtype=torch.float32)
    pad_s = gather_s = 0.0
    calls = seen = 0
    total = 0.0
    per_call: dict[str, int] = {}
    dist.barrier()
    started = time.perf_counter()
    for tokens, lengths in loader:
        predictions = tokens.to(torch.float32).unsqueeze(-1) * scale  # (batch, length, hidden)
        suffix = _COUNTED.get(calls, "")
        with _counting(per_call, "pad" + suffix, enabled=calls in _COUNTED):
            t0 = time.perf_counter()
            padded = accelerator.pad_across_processes(predictions, dim=1)
            t1 = time.perf_counter()
        with _counting(per_call, "gather" + suffix, enabled=calls in _COUNTED):
            gathered, gathered_lengths = accelerator.gather_for_metrics((padded, lengths))
            t2 = time.perf_counter()
        pad_s, gather_s, calls = pad_s + t1 - t0, gather_s + t2 - t1, calls + 1
        if local_rank == 0:
            keep = torch.arange(gathered.shape[1]) < gathered_lengths.unsqueeze(1)
            total += float((gathered.sum(-1) * keep).sum(dtype=torch.float64))
            seen += len(gathered_lengths)
    dist.barrier()
    seconds = time.perf_counter() - started
    if local_rank == 0:
        expected = float(data.tokens.sum(dtype=torch.float64)) * float(scale.sum())
        harness.write_result(
            result_path,
            {
                "seconds": seconds,
                "pad_s": pad_s,
                "gather_s": gather_s,
                "calls": calls,
                "collectives_per_call": per_call,
                "gathered_samples": seen,
                "value_sum": total,
                "expected_sum": expected,
            },
        )
    dist.barrier()
    dist.destroy_process_group()


# -- the parent --------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    group = parser.add_argument_group(NAME)
    group.add_argument("--collectives_reps", type=int, default=None, help="counted reps (5)")
    group.add_argument(
        "--collectives_samples", type=int, default=None, help="evaluation set size (40001)"
    )
    group.add_argument("--collectives_world", type=int, default=None, help="ranks (2)")


def _config(options: argparse.Namespace) -> Config:
    config = Config(
        world_size=harness.resolve(options, "collectives_world", 2, 2),
        samples=harness.resolve(options, "collectives_samples", Config.samples, 1_001),
        reps=harness.resolve(options, "collectives_reps", Config.reps, 1),
    )
    if config.reps < 1 or config.world_size < 2 or config.samples < config.world_size:
        raise SystemExit("collectives: reps >= 1, world >= 2, samples >= world.")
    return config


def _repetition(subject: str, config: Config) -> dict[str, Any]:
    result = harness.launch_ranks(_worker, (subject, config), config.world_size)
    if result["gathered_samples"] != config.samples:
        raise RuntimeError(
            f"{SUBJECTS[subject]}: gather_for_metrics gave back {result['gathered_samples']} "
            f"samples, not the {config.samples} of the evaluation set."
        )
    if abs(result["value_sum"] - result["expected_sum"]) > 1e-9 * abs(result["expected_sum"]):
        raise RuntimeError(
            f"{SUBJECTS[subject]}: the gathered values sum to {result['value_sum']!r}, the "
            f"evaluation set to {result['expected_sum']!r}."
        )
    result["samples_per_s"] = config.samples / result["seconds"]
    return result


def _summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    base = {
        k: statistics.median(r[k] for r in runs[BASELINE]) for k in ("pad_s", "gather_s", "seconds")
    }
    out = {}
    for subject, results in runs.items():
        item: dict[str, Any] = {
            "label": SUBJECTS[subject],
            "calls": results[0]["calls"],
            "collectives_per_call": results[0].get("collectives_per_call", {}),
        }
        for key in ("pad_s", "gather_s", "seconds"):
            stats = harness.summarise([r[key] for r in results])
            item[key] = stats
            item[f"{key}_vs_nbaccel"] = stats["median"] / base[key]
        item["samples_per_s"] = harness.summarise([r["samples_per_s"] for r in results])
        out[subject] = item
    return out


def _markdown(payload: dict[str, Any]) -> str:
    config, subjects = payload["config"], payload["subjects"]
    rows = [
        "| Subject | pad_across_processes s | vs nbaccel | gather_for_metrics s | vs nbaccel"
        " | whole evaluation s | samples/s | collectives per pad, per gather: first; ninth batch |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for item in subjects.values():
        cells = [item["label"]]
        for key in ("pad_s", "gather_s"):
            s = item[key]
            cells += [
                f"{s['median']:.3f} ({s['min']:.3f} - {s['max']:.3f})",
                f"**{item[f'{key}_vs_nbaccel']:.2f}x**",
            ]
        s = item["seconds"]
        cells += [
            f"{s['median']:.2f} ({s['min']:.2f} - {s['max']:.2f})",
            f"{item['samples_per_s']['median']:,.0f}",
        ]
        counts = item["collectives_per_call"]
        cells.append(
            f"{counts.get('pad', 0)}, {counts.get('gather', 0)}; "
            f"{counts.get('pad_steady', 0)}, {counts.get('gather_steady', 0)}"
        )
        rows.append("| " + " | ".join(cells) + " |")
    calls = next(iter(subjects.values()))["calls"]
    return f"""## Collectives on an evaluation set (`collectives`)

{config["world_size"]} CPU ranks (gloo) evaluate {config["samples"]:,} sequences of
{config["min_length"]} to {config["max_length"]} positions through a prepared DataLoader
(`Accelerator(cpu=True).prepare`, {config["batch_size"]} sequences per rank per batch, each
batch padded to its own longest sequence, so the ranks' lengths differ). For each of the
{calls} batches every rank calls `pad_across_processes(predictions, dim=1)` on its
`(batch, length, {config["hidden"]})` float32 predictions, then
`gather_for_metrics((padded, lengths))`. The set is not a multiple of the ranks x the batch:
the last batch is evened out and `gather_for_metrics` drops the duplicates; rank 0 checks that
exactly {config["samples"]:,} samples with the right values came back (checked for every run).
Times are rank 0's, summed over the calls of one evaluation; median (min - max) of
{config["reps"]} repetitions per subject after one uncounted warm-up, subjects alternating,
fresh processes each time; ratio = median / nbaccel's median (above 1: slower than nbaccel).
The last column counts the `torch.distributed` collectives each call ran, on the first batch
and on the ninth (the loop's steady state): a call costs about one gloo round trip per
collective at these sizes.

{chr(10).join(rows)}

Every repetition is in `benchmarks/results/{NAME}.json`.

{harness.machine_markdown(payload["machine"], f"python -m benchmarks {NAME}")}

![{NAME}](img/{NAME}.png)
"""


def _plot(payload: dict[str, Any]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    subjects = list(payload["subjects"].values())
    keys = [
        ("pad_s", "pad_across_processes"),
        ("gather_s", "gather_for_metrics"),
        ("seconds", "whole evaluation"),
    ]
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=120)
    width = 0.8 / len(subjects)
    for i, item in enumerate(subjects):
        xs = [j + (i - (len(subjects) - 1) / 2) * width for j in range(len(keys))]
        med = [item[k]["median"] for k, _ in keys]
        err = [
            [m - item[k]["min"] for m, (k, _) in zip(med, keys, strict=True)],
            [item[k]["max"] - m for m, (k, _) in zip(med, keys, strict=True)],
        ]
        ax.bar(xs, med, width, yerr=err, capsize=4, label=item["label"])
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels([label for _, label in keys])
    ax.set_ylabel("seconds per evaluation (median; bars min-max)")
    config, machine = payload["config"], payload["machine"]
    ax.set_title(
        f"{config['samples']:,} uneven sequences, {config['world_size']} CPU ranks (gloo)\n"
        f"{machine['cpu_model']}, {machine['usable_cores']} cores",
        fontsize=10,
    )
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    return fig


def run(options: argparse.Namespace) -> None:
    """Measure, print, and (unless --no-write) write JSON, docs section and plot."""
    started = time.monotonic()
    versions = harness.require_subjects(options, ("torch", "nbaccel"), ("accelerate", "matplotlib"))
    config = _config(options)
    subjects = [s for s in SUBJECTS if s == BASELINE or not getattr(options, "no_peers", False)]
    print(
        f"{NAME}: {subjects} x (1 warm-up + {config.reps}) evaluations of {config.samples} "
        f"samples on {config.world_size} ranks",
        flush=True,
    )
    machine = harness.machine_description(versions)
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in subjects}
    for rep in range(config.reps + 1):
        for subject in subjects:
            result = _repetition(subject, config)
            print(
                f"  {'warm-up' if rep == 0 else f'rep {rep}/{config.reps}':<10} "
                f"{SUBJECTS[subject]:<27} pad {result['pad_s']:.3f} s  gather "
                f"{result['gather_s']:.3f} s  evaluation {result['seconds']:.2f} s",
                flush=True,
            )
            if rep:
                runs[subject].append(result)
    payload = {
        "benchmark": NAME,
        "machine": harness.finish_machine(machine, started),
        "config": asdict(config),
        "subjects": _summary(runs),
        "runs": runs,
    }
    text = _markdown(payload)
    harness.publish(options, NAME, payload, text, _plot)
