"""DeepSpeed ZeRO on 2 CPU ranks (gloo): ``python -m benchmarks deepspeed``.

Step time of ZeRO-2 and ZeRO-3 through nbaccel's ``Accelerator`` (``notebook_launcher``, fork)
against DeepSpeed driven by hand under torchrun (``deepspeed.initialize`` with the same config,
``engine.backward`` / ``engine.step``), as a user runs it and again with nbaccel's malloc settings
given through glibc's variables (what nbaccel's ranks set themselves: the Accelerator's own cost
apart from the allocator's), and against plain DDP through nbaccel's ``Accelerator``;
and the bytes of parameters + gradients + optimizer state per rank, ZeRO-3 against DDP.
Targets: nbaccel at most 1.02x hand-written DeepSpeed's step time; ZeRO-3 at most 0.55x DDP's
bytes. The ranks' code is :mod:`benchmarks.deepspeed_ranks`; the report
:mod:`benchmarks.deepspeed_report`. (Every import here is absolute, so this module never
stands for the ``deepspeed`` package; the ranks run with ``-m`` from the repository's root.)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from typing import Any

from nbaccel.environment import malloc_variables

from . import deepspeed_report, harness
from .deepspeed_ranks import Setup, request

__all__ = ["NAME", "SUBJECTS", "SUMMARY", "add_arguments", "run"]

NAME = "deepspeed"
SUMMARY = "ms/step of ZeRO-2/3 via nbaccel vs hand-written DeepSpeed (torchrun) vs DDP; bytes"
SUBJECTS = deepspeed_report.SUBJECTS
NBACCEL_RUNS = ["zero2", "zero3", "ddp"]  # one nbaccel launch, in this order
HAND_RUNS = ["zero2", "zero3"]  # one torchrun launch: the same positions as nbaccel's
# the second torchrun launch: glibc's own variables for the thresholds nbaccel's ranks fix
TUNED_MALLOC = malloc_variables({})
LOSS_RTOL = {"same_engine": 1e-6, "vs_ddp": 1e-4}
TORCHRUN_TIMEOUT = 900


# -- launches ----------------------------------------------------------------------------------
def _per_subject(prefix: str, ranks: list[dict[str, Any]], setup: Setup) -> dict[str, Any]:
    """One launch's ranks folded into one result per subject: each step's time is the slowest
    rank's; CPU time is the ranks' together; bytes are the largest rank's."""
    out: dict[str, Any] = {}
    for subject in ranks[0]:
        per_rank = [r[subject] for r in ranks]
        steps = [max(times) for times in zip(*(r["step_s"] for r in per_rank), strict=True)]
        threads = {r["threads"] for r in per_rank}
        if threads != {setup.threads}:
            raise RuntimeError(f"{prefix}{subject} ran with {threads} threads, not {setup.threads}")
        result = {
            "step_ms": 1e3 * statistics.median(steps),
            "mean_step_ms": 1e3 * max(r["seconds"] for r in per_rank) / setup.steps,
            "cpu_step_ms": 1e3 * sum(r["cpu_s"] for r in per_rank) / setup.steps,
            "steps_ms": [round(1e3 * s, 3) for s in steps],
            "losses": per_rank[0]["losses"],
        }
        if "config" in per_rank[0]:
            result["config"] = per_rank[0]["config"]
        if "memory" in per_rank[0]:
            result["memory"] = max((r["memory"] for r in per_rank), key=lambda m: m["bytes"])
        out[prefix + subject] = result
    return out


def _nbaccel_launch(setup: Setup) -> dict[str, Any]:
    from nbaccel import notebook_launcher  # the subject under test, loaded when it runs

    from .deepspeed_ranks import nbaccel_ranks

    harness.prewarm_imports()
    quiet = io.StringIO()  # the banner and the ranks' lines (DeepSpeed's are many)
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            ranks = notebook_launcher(
                nbaccel_ranks,
                (NBACCEL_RUNS, setup),
                num_processes=setup.world,
                start_method="fork",
            )
    except BaseException:
        sys.stderr.write(quiet.getvalue()[-6000:])
        raise
    return _per_subject("nbaccel_", ranks, setup)


def _torchrun_launch(setup: Setup, tuned: bool = False) -> dict[str, Any]:
    """``python -m torch.distributed.run --standalone --nproc_per_node N -m
    benchmarks.deepspeed_ranks``: fresh interpreters, as a user's script under torchrun;
    ``tuned``: with :data:`TUNED_MALLOC` in their environment."""
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", *TUNED_MALLOC)
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(OMP_NUM_THREADS=str(setup.threads), DS_ACCELERATOR="cpu")
    if tuned:
        env.update(TUNED_MALLOC)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(harness.ROOT), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="nbaccel-bench-ds-") as tmp:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            str(setup.world),
            "-m",
            "benchmarks.deepspeed_ranks",
            request(HAND_RUNS, setup, tmp),
        ]
        done = subprocess.run(
            command,
            cwd=harness.ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=TORCHRUN_TIMEOUT,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"hand-written DeepSpeed under torchrun failed (exit status {done.returncode}):"
                f"\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
            )
        ranks = []
        for rank in range(setup.world):
            with open(os.path.join(tmp, f"rank{rank}.json"), encoding="utf-8") as handle:
                ranks.append(json.load(handle))
    return _per_subject("tuned_" if tuned else "deepspeed_", ranks, setup)


def _tuned_torchrun_launch(setup: Setup) -> dict[str, Any]:
    return _torchrun_launch(setup, tuned=True)


# -- measuring -------------------------------------------------------------------------------
def _measure(setup: Setup, reps: int, warmups: int) -> dict[str, list[dict[str, Any]]]:
    """``warmups`` uncounted rounds, then ``reps`` rounds; each round is one nbaccel launch and
    two torchrun launches (plain, then with nbaccel's malloc settings), their order rotating
    from round to round."""
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SUBJECTS}
    launches = [_nbaccel_launch, _torchrun_launch, _tuned_torchrun_launch]
    for rnd in range(warmups + reps):
        label = "warm-up" if rnd < warmups else f"rep {rnd - warmups + 1}/{reps}"
        results: dict[str, Any] = {}
        turn = rnd % len(launches)
        for launch in launches[turn:] + launches[:turn]:
            results.update(launch(setup))
        for subject, label_text in SUBJECTS.items():
            result = results[subject]
            print(
                f"  {label:<10} {label_text:<36} {result['step_ms']:8.2f} ms/step "
                f"(mean {result['mean_step_ms']:.2f}; CPU {result['cpu_step_ms']:.2f})",
                flush=True,
            )
            if rnd >= warmups:
                runs[subject].append(result)
    return runs


def _largest_difference(a: list[float], b: list[float], rtol: float, what: str) -> float:
    """The largest relative difference between two loss curves; raises above ``rtol``."""
    worst = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b, strict=True))
    if worst > rtol:
        raise RuntimeError(f"{what}: the losses differ by {worst:.2e} (relative), > {rtol:.0e}")
    return worst


def _one_size(results: list[dict[str, Any]], what: str) -> None:
    if len({r["memory"]["bytes"] for r in results}) != 1:
        raise RuntimeError(f"{what}: the bytes held differ between launches or subjects")


def _same_but_the_copy(ours: dict[str, Any], hand: dict[str, Any], what: str) -> None:
    """nbaccel's engine holds what the hand-written one holds, less the second fp32 copy of
    the parameter shards that DeepSpeed keeps by itself (nbaccel steps the shards in place)."""
    if ours.get("fp32_copy", 0) != 0:
        raise RuntimeError(f"{what}: nbaccel's engine keeps a second fp32 copy of the shards")
    if ours["bytes"] != hand["bytes"] - hand.get("fp32_copy", 0):
        raise RuntimeError(f"{what}: nbaccel holds {ours['bytes']} bytes, by hand {hand['bytes']}")


def check_same_training(runs: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """nbaccel and hand-written DeepSpeed must run the same config (as DeepSpeed parsed it),
    reach the same losses and hold the same bytes (but DeepSpeed's second copy of the fp32
    shards, which nbaccel's engine does not keep); ZeRO-3 and DDP must train like ZeRO-2 (to
    rounding). Returns the largest relative loss differences."""
    worst: dict[str, float] = {}
    reference = runs["deepspeed_zero2"][0]["losses"]
    for stage, by in [(s, by) for s in ("zero2", "zero3") for by in ("deepspeed", "tuned")]:
        ours, hand = runs[f"nbaccel_{stage}"], runs[f"{by}_{stage}"]
        for a, b in zip(ours, hand, strict=True):
            differ = {k: (v, b["config"][k]) for k, v in a["config"].items() if v != b["config"][k]}
            if differ:
                raise RuntimeError(f"{stage}: nbaccel's engine and the hand-written one: {differ}")
            what = f"{stage}, nbaccel vs hand-written DeepSpeed"
            found = _largest_difference(a["losses"], b["losses"], LOSS_RTOL["same_engine"], what)
            worst[stage] = max(worst.get(stage, 0.0), found)
        if "memory" in ours[0]:
            _one_size(ours, f"{stage} through nbaccel")
            _one_size(hand, f"{stage} by hand ({by})")
            _same_but_the_copy(ours[0]["memory"], hand[0]["memory"], stage)
    for subject in ("nbaccel_zero3", "nbaccel_ddp"):
        key = f"{subject} vs deepspeed_zero2"
        for result in runs[subject]:
            found = _largest_difference(result["losses"], reference, LOSS_RTOL["vs_ddp"], key)
            worst[key] = max(worst.get(key, 0.0), found)
    _one_size(runs["nbaccel_ddp"], "DDP")
    return worst


# -- options ---------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This benchmark's options."""
    group = parser.add_argument_group(NAME)
    group.add_argument("--ds_reps", type=int, default=None, help="counted rounds (5)")
    group.add_argument("--ds_steps", type=int, default=None, help="timed steps a subject (50)")
    group.add_argument("--ds_warmup", type=int, default=None, help="untimed steps first (10)")


def _setup(options: argparse.Namespace) -> tuple[Setup, int, int]:
    reps = harness.resolve(options, "ds_reps", 5, 1)
    steps = harness.resolve(options, "ds_steps", 50, 3)
    warmup = harness.resolve(options, "ds_warmup", 10, 1)
    if reps < 1 or steps < 1 or warmup < 1:
        raise SystemExit("deepspeed: --ds_reps, --ds_steps and --ds_warmup must be >= 1.")
    world = Setup.world
    setup = replace(Setup(), steps=steps, warmup=warmup, threads=harness.threads_per_process(world))
    return setup, reps, 0 if getattr(options, "quick", False) else 1


def _command(options: argparse.Namespace) -> str:
    """The command line that gives this run's figures (its own options spelled out)."""
    given = [
        f"--{name} {getattr(options, name)}"
        for name in ("ds_reps", "ds_steps", "ds_warmup")
        if getattr(options, name, None) is not None
    ]
    return " ".join([f"python -m benchmarks {NAME}", *given])


def run(options: argparse.Namespace) -> None:
    """Measure, print, and (unless --no-write) write JSON, docs section and plot."""
    started = time.monotonic()
    versions = harness.require_subjects(options, ("torch", "nbaccel", "deepspeed"), ("matplotlib",))
    setup, reps, warmups = _setup(options)
    print(
        f"{NAME}: {len(SUBJECTS)} subjects x ({warmups} warm-up + {reps}) rounds, "
        f"{setup.warmup} + {setup.steps} steps each, {setup.world} ranks x {setup.threads} "
        "thread(s)",
        flush=True,
    )
    machine = harness.machine_description(versions)
    runs = _measure(setup, reps, warmups)
    differences = check_same_training(runs)
    payload = {
        "benchmark": NAME,
        "machine": harness.finish_machine(machine, started),
        "config": {**asdict(setup), "reps": reps, "warmup_rounds": warmups},
        "loss_differences": differences,
        **deepspeed_report.summary(runs),
        "runs": runs,
    }
    text = deepspeed_report.markdown(payload, _command(options))
    print(deepspeed_report.verdicts(payload))
    harness.publish(options, NAME, payload, text, deepspeed_report.plot)
