"""The subjects of ``multihost``'s Ray part, run on the Ray bed's login machine (the head;
``multihost_ray.py`` starts this file there): one process joins the cluster once
(``ray.init()``, ``RAY_ADDRESS``) and every subject launches from it onto the same two nodes.

    python multihost_ray_driver.py REPS CALLS STORAGE [--no-peers]

Cold launches of 2 nodes x 1 rank alternate between ``notebook_launcher(hosts="ray")`` and Ray
Train's ``TorchTrainer(...).fit()`` (storage under STORAGE, shared by the nodes), one uncounted
warm-up each first; each starts once the cluster's 2 CPUs are free again and the machine is
quiet (the last subject's processes done exiting: at most a quarter of its cores busy over
half a second); those waits are not timed. Then ``WorkerPool(hosts="ray")``: its start and
its warm round trips. Last, the parts a launch is made of, timed alone: a placement group of
the 2 bundles, a fresh actor on each node and ``import torch`` in it. Progress lines start
with ``[progress]``; the last line is ``RESULT {json}``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from typing import Any, cast

PROGRESS = "[progress]"
NODES = 2


def _stamp(rank: int, enter: float, joined: float, value: float) -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "rank": rank,
        "value": value,
        "enter": enter,
        "joined": joined,
        "exit": time.time(),
    }


def _nbaccel(_: str, rep: int) -> tuple[float, dict[str, Any], Any]:
    from nbaccel import notebook_launcher

    def task() -> dict[str, Any]:
        enter = time.time()
        import torch
        import torch.distributed as dist

        from nbaccel import PartialState

        state = PartialState()  # joins the process group
        joined = time.time()
        tensor = torch.tensor([float(state.process_index + 1)])
        dist.all_reduce(tensor)
        return _stamp(state.process_index, enter, joined, float(tensor))

    begin = time.time()
    results = notebook_launcher(task, num_processes=1, hosts="ray")
    end = time.time()
    return end - begin, _phases(begin, results[0], end), [(r["host"], r["value"]) for r in results]


def _torchtrainer(storage: str, rep: int) -> tuple[float, dict[str, Any], Any]:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    def task() -> dict[str, Any]:
        enter = time.time()
        import torch
        import torch.distributed as dist

        # Ray Train has joined the process group (gloo) before calling this
        tensor = torch.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(tensor)
        return _stamp(dist.get_rank(), enter, enter, float(tensor))

    trainer = TorchTrainer(
        cast(Any, task),  # Ray Train hands back what rank 0 returns (its stubs say None)
        scaling_config=ScalingConfig(num_workers=NODES, use_gpu=False),
        run_config=RunConfig(name=f"rep{rep}-{time.time_ns()}", storage_path=storage),
    )
    begin = time.time()
    result = trainer.fit()
    end = time.time()
    if result.error is not None:
        raise RuntimeError(f"TorchTrainer.fit() failed: {result.error}")
    rank0 = cast(Any, result).return_value
    return end - begin, _phases(begin, rank0, end), [(rank0["host"], rank0["value"])]


def _phases(begin: float, rank0: dict[str, Any], end: float) -> dict[str, float]:
    """Where a launch's time went, by rank 0's clock stamps (one kernel, one clock): ``up``
    until the function ran, ``join`` the process group, ``work`` the all-reduce, ``down``
    from its return to the launcher's."""
    return {
        "up": rank0["enter"] - begin,
        "join": rank0["joined"] - rank0["enter"],
        "work": rank0["exit"] - rank0["joined"],
        "down": end - rank0["exit"],
    }


def _cpus_free(ray: Any, timeout: float = 60.0) -> float:
    """Wait until the cluster's CPUs are all free again (the last subject's actors and
    placement group gone); the seconds waited."""
    begin = time.monotonic()
    total = ray.cluster_resources().get("CPU", 0)
    while ray.available_resources().get("CPU", 0) < total:
        if time.monotonic() - begin > timeout:
            raise RuntimeError(f"the cluster's {total:g} CPUs were not free within {timeout} s")
        time.sleep(0.05)
    return time.monotonic() - begin


def _cpu_times() -> tuple[int, int]:
    """(idle, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    return fields[3] + fields[4], sum(fields)


def _quiet(timeout: float = 20.0, busy_at_most: float = 0.25) -> float:
    """Wait until the machine's cores are at most ``busy_at_most`` busy over half a second
    (what the last subject started has done exiting); the seconds waited. Gives up quietly
    after ``timeout`` (a busy machine is reported by the load averages)."""
    begin = time.monotonic()
    while time.monotonic() - begin < timeout:
        idle0, total0 = _cpu_times()
        time.sleep(0.5)
        idle1, total1 = _cpu_times()
        if total1 > total0 and 1 - (idle1 - idle0) / (total1 - total0) <= busy_at_most:
            break
    return time.monotonic() - begin


def _one() -> int:
    return 1


def _pool(calls: int) -> dict[str, Any]:
    from nbaccel import WorkerPool

    begin = time.perf_counter()
    pool = WorkerPool(hosts="ray")
    out: dict[str, Any] = {"start_s": time.perf_counter() - begin}
    try:
        out["hosts"] = pool.hosts
        for name, call in (("run_ms", lambda: pool.run(_one)), ("execute_ms", _execute(pool))):
            first = call()
            times = []
            for _ in range(calls):
                tick = time.perf_counter()
                call()
                times.append((time.perf_counter() - tick) * 1000)
            out[name], out[name.replace("_ms", "_value")] = times, first
    finally:
        pool.shutdown()
    return out


def _execute(pool: Any) -> Any:
    return lambda: pool.execute("1 + 1")


class _Probe:
    """A bare actor: how long its start takes, and what the agent an ``AgentHost`` actor starts
    then imports (nbaccel's package: torch and the rest of nbaccel). The actor's class itself
    travels by value and imports only the standard library."""

    def ready(self) -> str:
        return socket.gethostname()

    def agent_process(self) -> float:
        """A fresh interpreter that imports what ``python -m nbaccel.launch.agent`` does."""
        import subprocess

        begin = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import nbaccel.launch.agent.main"], check=True)
        return time.perf_counter() - begin


def _parts(ray: Any) -> dict[str, float]:
    """The parts a launch on 2 nodes is made of, each timed alone (after the launches)."""
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    _cpus_free(ray)
    begin = time.perf_counter()
    group = placement_group([{"CPU": 1.0}] * NODES, "STRICT_SPREAD")
    ray.get(group.ready(), timeout=60)
    out = {"placement_group_s": time.perf_counter() - begin}
    probe = ray.remote(_Probe)
    begin = time.perf_counter()
    actors = [
        probe.options(
            num_cpus=1, scheduling_strategy=PlacementGroupSchedulingStrategy(group, index)
        ).remote()
        for index in range(NODES)
    ]
    ray.get([actor.ready.remote() for actor in actors], timeout=120)
    out["actor_start_s"] = time.perf_counter() - begin
    for part in ("agent_process",):
        calls = [getattr(actor, part).remote() for actor in actors]
        out[f"{part}_s"] = max(ray.get(calls, timeout=120))  # the nodes run side by side
    for actor in actors:
        ray.kill(actor, no_restart=True)
    remove_placement_group(group)
    return out


def _actors() -> dict[str, int]:
    """How many actors of each class this driver's job started, by Ray's state API (the
    dashboard's): what each subject's launches cost in Ray worker processes."""
    from ray.util.state import list_actors

    found: dict[str, int] = {}
    for actor in list_actors(limit=10_000, raise_on_missing_output=False):
        found[actor.class_name] = found.get(actor.class_name, 0) + 1
    return found


def _progress(text: str) -> None:
    print(f"{PROGRESS} {text}", flush=True)


def main() -> int:
    reps, calls, storage = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    peers = "--no-peers" not in sys.argv[4:]
    import ray

    import nbaccel  # noqa: F401 - imported before the clock, as a notebook has

    if peers:
        import ray.train.torch  # likewise

    begin = time.perf_counter()
    ray.init(address=os.environ["RAY_ADDRESS"], logging_level=logging.ERROR, log_to_driver=False)
    out: dict[str, Any] = {"ray_init_s": time.perf_counter() - begin, "results": {}}
    subjects = [("nbaccel", _nbaccel)] + ([("torchtrainer", _torchtrainer)] if peers else [])
    for name, _ in subjects:
        out[name], out[f"{name}_phases"], out[f"{name}_waited_s"] = [], [], []
    for rep in range(reps + 1):
        for name, subject in subjects:
            waited = _cpus_free(ray) + _quiet()
            seconds, phases, results = subject(storage, rep)
            what = "warm-up" if rep == 0 else f"rep {rep}/{reps}"
            parts = " ".join(f"{k} {v:.2f}" for k, v in phases.items())
            _progress(f"{what:<10} {name:<12} {seconds:6.2f} s ({parts}; waited {waited:.2f} s)")
            if rep:
                out[name].append(seconds)
                out[f"{name}_phases"].append(phases)
                out[f"{name}_waited_s"].append(waited)
            out["results"][name] = results
    _cpus_free(ray)
    out["pool"] = _pool(calls)
    _progress(f"pool started in {out['pool']['start_s']:.2f} s on {out['pool']['hosts']}")
    out["actors"] = _actors()
    out["parts"] = _parts(ray)
    _progress("parts: " + ", ".join(f"{k} {v:.2f}" for k, v in out["parts"].items()))
    ray.shutdown()
    print("RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
