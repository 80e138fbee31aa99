"""Launch latency: from the call to the returned result, for a function that joins the process
group and does one all-reduce, on 2 and 4 CPU processes, in a script.

Each subject runs in its own long-lived process (as a notebook kernel would), so a launcher
that leaves signal handlers behind cannot disturb the others. Subjects, run alternately:
nbaccel's notebook_launcher (fork and spawn), Hugging
Face Accelerate's notebook_launcher (``cpu=True`` inside, so it really runs the processes),
Lightning Fabric's ``ddp_notebook`` strategy, and ``torch.multiprocessing.start_processes``
(fork and spawn). A peer that is missing or fails makes the run fail.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from .harness import machine_description, require, summarise, update_docs_section, write_json

__all__ = ["NAME", "SUMMARY", "add_arguments", "run"]

NAME = "launch_latency"
SUMMARY = "seconds from the launcher call to the result: join + one all-reduce, 2 and 4 CPU ranks"


# -- the function every subject runs ---------------------------------------------------------
def _all_reduce() -> float:
    import torch
    import torch.distributed as dist

    value = torch.ones(1)
    dist.all_reduce(value)
    return float(value.item())


def nbaccel_work() -> float:
    """What nbaccel's workers run: the state joins the group, then one all-reduce."""
    from nbaccel import PartialState

    PartialState()
    return _all_reduce()


def accelerate_work() -> float:
    """What Accelerate's workers run (cpu=True, as a CPU user must)."""
    from accelerate import PartialState

    PartialState(cpu=True)
    return _all_reduce()


def fabric_work(fabric: Any) -> float:
    """What Fabric's workers run: Fabric has joined the group already."""
    return _all_reduce()


def _torch_work(rank: int, world: int, port: int) -> None:
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    _all_reduce()
    dist.destroy_process_group()


# -- subjects --------------------------------------------------------------------------------
def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _nbaccel(method: str) -> Callable[[int], Any]:
    def launch(world: int) -> Any:
        from nbaccel import notebook_launcher

        return notebook_launcher(nbaccel_work, num_processes=world, start_method=method)

    return launch


def _accelerate(world: int) -> Any:
    from accelerate import notebook_launcher

    return notebook_launcher(accelerate_work, num_processes=world, use_port=str(_port()))


def _fabric(world: int) -> Any:
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=world, strategy="ddp_notebook")
    return fabric.launch(fabric_work)


def _torch(method: str) -> Callable[[int], Any]:
    def launch(world: int) -> Any:
        import torch.multiprocessing as mp

        return mp.start_processes(
            _torch_work, args=(world, _port()), nprocs=world, start_method=method
        )

    return launch


SUBJECTS: dict[str, Callable[[int], Any]] = {
    "nbaccel fork": _nbaccel("fork"),
    "nbaccel spawn": _nbaccel("spawn"),
    "Accelerate notebook_launcher": _accelerate,
    "Lightning Fabric ddp_notebook": _fabric,
    "torch start_processes fork": _torch("fork"),
    "torch start_processes spawn": _torch("spawn"),
}


def _timed(launch: Callable[[int], Any], world: int) -> float:
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        started = time.perf_counter()
        launch(world)
        return time.perf_counter() - started


def _runner(name: str, conn: Any) -> None:
    """One long-lived process per subject, as a notebook kernel is: launchers that leave signal
    handlers or process-group kills behind cannot disturb the other subjects."""
    os.environ["OMP_NUM_THREADS"] = "1"
    launch = SUBJECTS[name]
    while True:
        world = conn.recv()
        if world is None:
            return
        try:
            conn.send(("ok", _timed(launch, world)))
        except BaseException as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class _Subject:
    def __init__(self, name: str) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.name = name
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_runner, args=(name, child))
        self.process.start()

    def time(self, world: int) -> float:
        self.conn.send(world)
        status, value = self.conn.recv()
        if status != "ok":
            raise RuntimeError(f"{self.name} failed at {world} processes: {value}")
        return float(value)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.send(None)
        self.process.join(timeout=30)
        if self.process.is_alive():
            self.process.kill()


# -- the benchmark ---------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    group = parser.add_argument_group("launch_latency")
    group.add_argument("--latency_reps", type=int, default=5, help="counted launches each")
    group.add_argument(
        "--latency_worlds", default="2,4", help="process counts, comma-separated (default 2,4)"
    )


def run(options: argparse.Namespace) -> None:
    """Time every subject alternately; print, and (unless --no-write) record the table."""
    versions = require("torch", "nbaccel", "accelerate", "lightning")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    worlds = [int(w) for w in str(options.latency_worlds).split(",")]
    results: dict[str, dict[str, Any]] = {}
    subjects = [_Subject(name) for name in SUBJECTS]
    try:
        for world in worlds:
            times: dict[str, list[float]] = {s.name: [] for s in subjects}
            for subject in subjects:  # warm-up: imports, first fork
                subject.time(world)
            for rep in range(options.latency_reps):
                for subject in subjects:
                    times[subject.name].append(subject.time(world))
                    print(
                        f"  {world} procs rep {rep + 1}: {subject.name:32s} "
                        f"{times[subject.name][-1]:.3f} s"
                    )
            results[str(world)] = {name: summarise(values) for name, values in times.items()}
    finally:
        for subject in subjects:
            subject.close()
    table = _table(results)
    print(table)
    if not getattr(options, "no_write", False):
        write_json(NAME, {"machine": machine_description(versions), "results": results})
        update_docs_section(NAME, table)


def _table(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "## Launch latency (script)",
        "",
        "Seconds from the launcher call to the returned result; the function joins the process",
        "group and does one all-reduce. Medians of the counted launches, subjects alternating.",
        "",
        "| Processes | Subject | median s | min - max | vs nbaccel fork |",
        "| ---: | --- | ---: | ---: | ---: |",
    ]
    for world, subjects in results.items():
        base = subjects["nbaccel fork"]["median"]
        for name, stats in subjects.items():
            lines.append(
                f"| {world} | {name} | {stats['median']:.3f} | {stats['min']:.3f} - "
                f"{stats['max']:.3f} | {stats['median'] / base:.2f}x |"
            )
    return "\n".join(lines)
