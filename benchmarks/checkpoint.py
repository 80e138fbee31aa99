"""Checkpoint speed: save_state / load_state of a ~100M-parameter model with AdamW state,
nbaccel vs Hugging Face Accelerate side by side, and the disk's own speed in the same run.

Run: ``python -m benchmarks checkpoint`` (or ``python -m benchmarks.checkpoint [--params N]
[--repeats 5] [--dir PATH]``). After one untimed warm-up each, the libraries alternate
(nbaccel first in even repetitions, Accelerate first in odd ones); figures are medians. Both
libraries are treated alike: every save starts with no dirty data in the page cache
(``os.sync``, untimed) and writes into a new directory; every load starts cold (the
checkpoint's files are evicted from the page cache with ``posix_fadvise(DONTNEED)``, untimed).
Each checkpoint is loaded twice: into the live objects (the optimizer has state: loading it
back mid-run) and after ``optimizer.state.clear()`` (an optimizer that has not stepped yet,
as in a fresh process that resumes), in alternating order, so that neither kind is always
the one right after the save. The disk is measured in the same run, once per
repetition: the checkpoint's byte count written to one file by one thread (buffered, and with
``fsync``) and read back cold by one thread.

nbaccel's ``save_state`` flushes every file to the disk before it publishes the checkpoint;
Accelerate's does not. Its saves are therefore also timed with the same flush added (every
file and directory ``fsync``ed right after ``save_state``), and nbaccel's save is compared
with the disk's write *with* ``fsync``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["main"]

NAME = "checkpoint"
SUMMARY = "save_state/load_state of a ~100M-parameter model with AdamW: nbaccel vs Accelerate"
CHUNK = 16 * 2**20
LOADS = ("load", "resume")  # into the live optimizer; into one without state
_LABELS = {"nbaccel": "nbaccel", "accelerate": "Accelerate"}


def _model(params: int, seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    """Square linear layers totalling about ``params`` parameters, with AdamW state."""
    width = 2048 if params >= 2048 * 2049 * 4 else 256
    layers = max(1, round(params / (width * width + width)))
    torch.manual_seed(seed)
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(2, width)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    return model, optimizer


def _files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file()]


def _evict(directory: Path) -> None:
    """Drop ``directory``'s files from the page cache so the next read comes from the disk."""
    os.sync()
    for path in _files(directory):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _timed(function: Callable[[], Any]) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def _disk(directory: Path, nbytes: int) -> dict[str, float]:
    """Seconds per byte to write ``nbytes`` (buffered, then with fsync) and to read them cold."""
    block = os.urandom(CHUNK)
    path = directory / "disk.bin"
    count = max(1, nbytes // CHUNK)

    def write(durable: bool) -> None:
        with open(path, "wb") as handle:
            for _ in range(count):
                handle.write(block)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())

    def read() -> None:
        with open(path, "rb", buffering=0) as handle:
            while handle.read(CHUNK):
                pass

    os.sync()
    buffered = _timed(lambda: write(False))
    os.sync()
    durable = _timed(lambda: write(True))
    _evict(directory)
    cold = _timed(read)
    path.unlink()
    size = count * CHUNK
    return {"write": buffered / size, "write_fsync": durable / size, "read": cold / size}


def _flush(directory: Path) -> None:
    """``fsync`` every file of ``directory`` and the directories, as nbaccel's save does."""
    for path in [*_files(directory), *[p for p in directory.rglob("*") if p.is_dir()], directory]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class _Subject:
    """One library's Accelerator with the prepared model and optimizer."""

    def __init__(self, name: str, params: int) -> None:
        self.name = name
        if name == "nbaccel":
            from nbaccel import Accelerator
        else:
            from accelerate import Accelerator  # type: ignore[no-redef]
        self.accelerator = Accelerator()
        model, optimizer = _model(params, seed=0)
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)

    def save(self, directory: Path) -> None:
        self.accelerator.save_state(str(directory))

    def load(self, directory: Path) -> None:
        self.accelerator.load_state(str(directory))

    def forget_optimizer_state(self) -> None:
        """As in a fresh process: the optimizer has no state until it steps or loads."""
        self.optimizer.optimizer.state.clear()
        gc.collect()


def _run(root: Path, params: int, repeats: int, peers: bool) -> dict[str, Any]:
    subjects = [_Subject(name, params) for name in ("nbaccel", "accelerate")[: 1 + peers]]
    kinds = ("save", *LOADS, "save_flushed")
    times: dict[str, dict[str, list[float]]] = {s.name: {k: [] for k in kinds} for s in subjects}
    sizes: dict[str, int] = {}
    disks: list[dict[str, float]] = []
    for subject in subjects:  # warm-up: the first large write of a process is the slowest
        subject.save(root / "warmup")
        subject.load(root / "warmup")
        shutil.rmtree(root / "warmup")
    for repeat in range(repeats):
        for subject in subjects if repeat % 2 == 0 else subjects[::-1]:
            directory = root / f"{subject.name}_{repeat}"
            measured = times[subject.name]
            os.sync()
            measured["save"].append(_timed(functools.partial(subject.save, directory)))
            flushed = _timed(functools.partial(_flush, directory))  # nbaccel's: already flushed
            measured["save_flushed"].append(measured["save"][-1] + flushed)
            sizes[subject.name] = sum(p.stat().st_size for p in _files(directory))
            for kind in LOADS if repeat % 2 == 0 else LOADS[::-1]:
                if kind == "resume":
                    subject.forget_optimizer_state()
                _evict(directory)
                measured[kind].append(_timed(functools.partial(subject.load, directory)))
            shutil.rmtree(directory)
        disks.append(_disk(root, sizes["nbaccel"]))  # the disk, alternating with the subjects
    disk = {k: statistics.median(d[k] for d in disks) for k in disks[0]}
    result: dict[str, Any] = {"params": params, "repeats": repeats, "bytes": sizes}
    result["subjects"] = {
        name: {
            kind: {
                "median_s": statistics.median(values),
                "GBps": sizes[name] / statistics.median(values) / 1e9,
                "values_s": [round(v, 4) for v in values],
            }
            for kind, values in measured.items()
        }
        for name, measured in times.items()
    }
    result["disk"] = {f"{k}_GBps": 1 / v / 1e9 for k, v in disk.items()}
    nb = result["subjects"]["nbaccel"]
    result["ratios"] = {
        "vs_disk": {
            "save": nb["save"]["GBps"] / result["disk"]["write_fsync_GBps"],
            "save_buffered": nb["save"]["GBps"] / result["disk"]["write_GBps"],
            **{k: nb[k]["GBps"] / result["disk"]["read_GBps"] for k in LOADS},
        },
    }
    if peers:
        hf = result["subjects"]["accelerate"]
        result["ratios"]["vs_accelerate"] = {
            k: hf[k]["median_s"] / nb[k]["median_s"] for k in kinds
        }
    return result


def _table(result: dict[str, Any]) -> list[str]:
    disk, ratios = result["disk"], result["ratios"]

    def cell(row: dict[str, Any]) -> str:
        return f"{row['median_s']:.2f} s, {row['GBps']:.2f} GB/s"

    lines = [
        "| | save | load (cold, into the live optimizer) | load (cold, optimizer without "
        "state: a resume) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, row in result["subjects"].items():
        lines.append(
            f"| {_LABELS[name]} | {cell(row['save'])} | {cell(row['load'])} | "
            f"{cell(row['resume'])} |"
        )
    if "accelerate" in result["subjects"]:
        row = result["subjects"]["accelerate"]["save_flushed"]
        lines.append(f"| Accelerate, then its files fsynced | {cell(row)} | | |")
    lines.append(
        f"| disk, the same bytes in one file | {disk['write_GBps']:.2f} GB/s buffered, "
        f"{disk['write_fsync_GBps']:.2f} GB/s with fsync | {disk['read_GBps']:.2f} GB/s cold "
        f"| {disk['read_GBps']:.2f} GB/s cold |"
    )
    if "vs_accelerate" in ratios:
        versus = ratios["vs_accelerate"]
        lines.append(
            f"| nbaccel / Accelerate (speed; > 1: nbaccel faster) | {versus['save']:.2f}x "
            f"(Accelerate not flushed); {versus['save_flushed']:.2f}x (both flushed) | "
            f"{versus['load']:.2f}x | {versus['resume']:.2f}x |"
        )
    vs_disk = ratios["vs_disk"]
    lines += [
        f"| nbaccel / disk (target >= 0.5) | {vs_disk['save']:.2f} of write with fsync "
        f"({vs_disk['save_buffered']:.2f} of buffered write) | {vs_disk['load']:.2f} of cold "
        f"read | {vs_disk['resume']:.2f} of cold read |",
    ]
    return lines


def _report(result: dict[str, Any]) -> str:
    sizes = ", ".join(
        f"{size / 1e9:.2f} GB ({_LABELS[name]})" for name, size in result["bytes"].items()
    )
    return "\n".join(
        [
            f"model: {result['params'] / 1e6:.0f}M parameters + AdamW state; checkpoint "
            f"{sizes}; medians of {result['repeats']}",
            "",
            *_table(result),
        ]
    )


def _markdown(result: dict[str, Any], machine: dict[str, Any]) -> str:
    from .harness import machine_markdown

    return "\n".join(
        [
            "## Checkpoint save and load (`checkpoint`)",
            "",
            "`save_state` and `load_state` of a model of square linear layers with AdamW state,",
            "nbaccel and Accelerate alternating in one process after a warm-up each; medians.",
            "Saves start with no dirty data in the page cache; nbaccel's flushes its files to",
            "the disk before publishing, Accelerate's does not (a row adds that flush to it).",
            "Loads start with the checkpoint's",
            "files evicted from it, into the live objects and, in alternating order, after",
            "`optimizer.state.clear()` (a fresh process resuming: its optimizer has no state",
            "until it loads). The disk row writes the same number of bytes to one file and reads",
            "them back cold with one thread, once per repetition in the same run (medians).",
            "",
            _report(result),
            "",
            machine_markdown(machine, f"python -m benchmarks {NAME}"),
        ]
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options (prefixed, so they do not clash with the others')."""
    group = parser.add_argument_group("checkpoint")
    group.add_argument("--checkpoint_params", type=int, default=100_000_000, help="parameters")
    group.add_argument(
        "--checkpoint_repeats", type=int, default=5, help="timed runs per library (median)"
    )
    group.add_argument("--checkpoint_dir", default=None, help="where to write (default: temp)")


def _measure(params: int, repeats: int, where: str | None, peers: bool = True) -> dict[str, Any]:
    logging.getLogger("accelerate").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    parent = Path(where) if where else None
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=parent, prefix="nbaccel-ckpt-bench-") as name:
        result = _run(Path(name), params, repeats, peers)
        result["directory"] = str(parent or Path(name).parent)
    return result


def run(options: argparse.Namespace) -> None:
    """From ``python -m benchmarks``: print the table; unless ``--no-write``, write
    ``benchmarks/results/checkpoint.json`` and this benchmark's section of the docs."""
    from . import harness

    peers = not getattr(options, "no_peers", False)
    versions = harness.require("torch", "nbaccel", *(["accelerate"] if peers else []))
    started = time.monotonic()
    machine = harness.machine_description(versions)
    result = _measure(
        options.checkpoint_params, options.checkpoint_repeats, options.checkpoint_dir, peers
    )
    harness.finish_machine(machine, started)
    print(_report(result))
    print(
        f"load average: {machine['load_average_at_start']} at the start, "
        f"{machine['load_average_at_end']} at the end"
    )
    if getattr(options, "no_write", False):
        return
    json_path = harness.write_json(NAME, {"benchmark": NAME, "machine": machine, **result})
    docs_path = harness.update_docs_section(NAME, _markdown(result, machine))
    print(f"wrote {json_path}, {docs_path}")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a markdown table; ``--json`` also writes the figures."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.checkpoint", description=__doc__)
    parser.add_argument("--params", type=int, default=100_000_000, help="model parameters")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per library")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp directory)")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    options = parser.parse_args(argv)
    try:
        import accelerate  # noqa: F401
    except ImportError:
        print("accelerate is not installed: pip install accelerate", file=sys.stderr)
        return 2
    load = os.getloadavg()
    result = _measure(options.params, options.repeats, options.dir)
    print(_report(result))
    print(
        f"load average: {[round(x, 2) for x in load]} at the start, "
        f"{[round(x, 2) for x in os.getloadavg()]} at the end"
    )
    if options.json:
        Path(options.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
