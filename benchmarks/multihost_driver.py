"""The subjects of ``multihost``, run on the hosts bed's login machine (``multihost.py`` starts
this file there): every subject launches from this one process onto the same two nodes.

    python multihost_driver.py REPS CALLS node1,node2 PER_HOST [--no-peers]

prints one JSON line: ``{"nbaccel": [s, ...], "torchrunx": [s, ...], "pool_call_ms": [...],
"pool_start_s": s, "results": {...}}``. Cold launches alternate between the subjects, one
uncounted warm-up each first; the pool's round trips come after its start.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any


def where_am_i() -> tuple[str, int]:
    """What every rank returns: its machine and its rank (after joining its group)."""
    import socket

    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_initialized() else -1
    return socket.gethostname(), rank


def _nbaccel(hosts: list[str], per_host: int) -> tuple[float, Any]:
    from nbaccel import PartialState, notebook_launcher

    def task() -> tuple[str, int]:
        PartialState()  # join the group, as a training function does first
        return where_am_i()

    start = time.perf_counter()
    results = notebook_launcher(task, num_processes=per_host, hosts=hosts)
    return time.perf_counter() - start, results


def _torchrunx(hosts: list[str], per_host: int) -> tuple[float, Any]:
    import torchrunx

    launcher = torchrunx.Launcher(hostnames=hosts, workers_per_host=per_host, backend="gloo")
    launcher.set_logging_handlers(None)  # nothing written to files: only the timing counts
    start = time.perf_counter()
    result = launcher.run(where_am_i)
    seconds = time.perf_counter() - start
    return seconds, [result.rank(i) for i in range(len(hosts) * per_host)]


def _pool(hosts: list[str], per_host: int, calls: int) -> tuple[float, list[float], Any]:
    from nbaccel import WorkerPool

    start = time.perf_counter()
    pool = WorkerPool(num_processes=per_host, hosts=hosts)
    started = time.perf_counter() - start
    try:
        first = pool.run(where_am_i)
        times = []
        for _ in range(calls):
            tick = time.perf_counter()
            pool.run(_one)
            times.append((time.perf_counter() - tick) * 1000)
    finally:
        pool.shutdown()
    return started, times, first


def _one() -> int:
    return 1


def main() -> int:
    reps, calls = int(sys.argv[1]), int(sys.argv[2])
    hosts, per_host = sys.argv[3].split(","), int(sys.argv[4])
    peers = "--no-peers" not in sys.argv[5:]
    logging.getLogger("torchrunx").setLevel(logging.WARNING)
    out: dict[str, Any] = {"nbaccel": [], "torchrunx": [], "results": {}}
    for rep in range(reps + 1):
        subjects = [("nbaccel", _nbaccel)] + ([("torchrunx", _torchrunx)] if peers else [])
        for name, subject in subjects:
            seconds, results = subject(hosts, per_host)
            print(
                f"  {'warm-up' if rep == 0 else f'rep {rep}/{reps}':<10} {name:<10} "
                f"{seconds:6.2f} s",
                file=sys.stderr,
                flush=True,
            )
            if rep:
                out[name].append(seconds)
            out["results"][name] = results
    out["pool_start_s"], out["pool_call_ms"], out["results"]["pool"] = _pool(hosts, per_host, calls)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
