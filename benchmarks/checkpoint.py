"""Checkpoint speed: save_state / load_state of a ~100M-parameter model with AdamW state,
nbaccel vs Hugging Face Accelerate side by side, and the disk's own speed in the same run.

Run: ``python -m benchmarks.checkpoint [--params 100000000] [--repeats 3] [--dir PATH]``.
After one untimed warm-up each, the libraries alternate; figures are medians. Every save
starts with the page cache flushed (``os.sync``, untimed) and every load, and the disk read,
starts cold (the files are evicted with ``posix_fadvise(DONTNEED)``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
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

CHUNK = 16 * 2**20


def _model(params: int, seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    """Square linear layers totalling about ``params`` parameters, with AdamW state."""
    width = 2048
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
    """Seconds to write ``nbytes`` (buffered, then durable with fsync) and to read them cold."""
    block = os.urandom(CHUNK)
    path = directory / "disk.bin"

    def write(durable: bool) -> None:
        with open(path, "wb") as handle:
            for _ in range(nbytes // CHUNK):
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
    size = nbytes // CHUNK * CHUNK
    return {"write": buffered / size, "write_fsync": durable / size, "read": cold / size}


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


def _machine(root: Path) -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    usage = shutil.disk_usage(root)
    return {
        "cpus": str(os.cpu_count()),
        "cpu": cpu,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "disk": f"{root} ({usage.total / 1e9:.0f} GB)",
    }


def _run(root: Path, params: int, repeats: int) -> dict[str, Any]:
    subjects = [_Subject("nbaccel", params), _Subject("accelerate", params)]
    times: dict[str, dict[str, list[float]]] = {s.name: {"save": [], "load": []} for s in subjects}
    sizes: dict[str, int] = {}
    for subject in subjects:  # warm-up: the first large write of a process is the slowest
        subject.save(root / "warmup")
        subject.load(root / "warmup")
        shutil.rmtree(root / "warmup")
    for repeat in range(repeats):
        for subject in subjects if repeat % 2 == 0 else subjects[::-1]:
            directory = root / f"{subject.name}_{repeat}"
            os.sync()
            times[subject.name]["save"].append(_timed(lambda s=subject, d=directory: s.save(d)))
            sizes[subject.name] = sum(p.stat().st_size for p in _files(directory))
            _evict(directory)
            times[subject.name]["load"].append(_timed(lambda s=subject, d=directory: s.load(d)))
            shutil.rmtree(directory)
    disk = _disk(root, sizes["nbaccel"])
    result: dict[str, Any] = {"params": params, "bytes": sizes, "subjects": {}}
    for name, measured in times.items():
        save, load = statistics.median(measured["save"]), statistics.median(measured["load"])
        result["subjects"][name] = {
            "save_s": save,
            "load_s": load,
            "save_GBps": sizes[name] / save / 1e9,
            "load_GBps": sizes[name] / load / 1e9,
        }
    result["disk"] = {f"{k}_GBps": 1 / v / 1e9 for k, v in disk.items()}
    return result


def _report(result: dict[str, Any], machine: dict[str, str]) -> str:
    nb, hf = result["subjects"]["nbaccel"], result["subjects"]["accelerate"]
    disk = result["disk"]
    lines = [
        f"machine: {machine['cpus']} CPUs, {machine['cpu']}; disk {machine['disk']}; "
        f"torch {machine['torch']}",
        f"model: {result['params'] / 1e6:.0f}M parameters + AdamW state; checkpoint "
        f"{result['bytes']['nbaccel'] / 1e9:.2f} GB (nbaccel), "
        f"{result['bytes']['accelerate'] / 1e9:.2f} GB (Accelerate)",
        "",
        "| | save s | save GB/s | load s (cold) | load GB/s |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, row in (("nbaccel", nb), ("Accelerate", hf)):
        lines.append(
            f"| {name} | {row['save_s']:.2f} | {row['save_GBps']:.2f} | {row['load_s']:.2f} | "
            f"{row['load_GBps']:.2f} |"
        )
    lines += [
        f"| disk (same bytes, one file) | | {disk['write_GBps']:.2f} buffered, "
        f"{disk['write_fsync_GBps']:.2f} with fsync | | {disk['read_GBps']:.2f} |",
        "",
        f"nbaccel / Accelerate: save {hf['save_s'] / nb['save_s']:.2f}x, load "
        f"{hf['load_s'] / nb['load_s']:.2f}x as fast (> 1: nbaccel faster)",
        f"nbaccel / disk: save {nb['save_GBps'] / disk['write_GBps']:.2f} of the buffered "
        f"write speed, load {nb['load_GBps'] / disk['read_GBps']:.2f} of the cold read speed",
    ]
    return "\n".join(lines)


NAME = "checkpoint"
SUMMARY = "save_state/load_state of a ~100M-parameter model with AdamW: nbaccel vs Accelerate"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options (prefixed, so they do not clash with the others')."""
    group = parser.add_argument_group("checkpoint")
    group.add_argument("--checkpoint_params", type=int, default=100_000_000, help="parameters")
    group.add_argument("--checkpoint_repeats", type=int, default=5, help="runs per library")
    group.add_argument("--checkpoint_dir", default=None, help="where to write (default: temp)")


def run(options: argparse.Namespace) -> None:
    """Run from ``python -m benchmarks``: prints the table, writes results/checkpoint.json."""
    results = Path(__file__).resolve().parent / "results" / "checkpoint.json"
    argv = [
        "--params",
        str(options.checkpoint_params),
        "--repeats",
        str(options.checkpoint_repeats),
        "--json",
        str(results),
    ]
    if options.checkpoint_dir:
        argv += ["--dir", options.checkpoint_dir]
    if main(argv) != 0:
        raise RuntimeError("the checkpoint benchmark failed (is accelerate installed?)")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print a markdown table; ``--json`` also writes the figures."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.checkpoint", description=__doc__)
    parser.add_argument("--params", type=int, default=100_000_000, help="model parameters")
    parser.add_argument(
        "--repeats", type=int, default=5, help="saves and loads per library (median)"
    )
    parser.add_argument("--dir", default=None, help="where to write (default: a temp directory)")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    options = parser.parse_args(argv)
    try:
        import accelerate  # noqa: F401
    except ImportError:
        print("accelerate is not installed: pip install accelerate", file=sys.stderr)
        return 2
    logging.getLogger("accelerate").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    parent = Path(options.dir) if options.dir else None
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=parent, prefix="nbaccel-ckpt-bench-") as name:
        root = Path(name)
        machine = _machine(root)
        result = _run(root, options.params, options.repeats)
    result["machine"] = machine
    print(_report(result, machine))
    if options.json:
        Path(options.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
