"""Functions that the launcher tests run in real workers (importable by spawned workers too)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch
import torch.distributed as dist

from nbaccel import PartialState, notebook_launcher
from nbaccel.launch.events import Event, emit, report_metrics, report_progress

BIG_ELEMENTS = 50 * 1024 * 1024  # 50 Mi float32 values: 200 MiB


def child_pids() -> set[int]:
    """Pids of every live (non-zombie) descendant of this process."""
    pids = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                pids.add(proc.pid)
        except psutil.NoSuchProcess:
            continue
    return pids


def wait_no_children(baseline: set[int], within: float = 5.0) -> set[int]:
    """Wait until no descendant beyond ``baseline`` is alive; return those that are left."""
    deadline = time.monotonic() + within
    left = child_pids() - baseline
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = child_pids() - baseline
    return left


def is_dead(pid: int) -> bool:
    """True when ``pid`` no longer runs (gone, or a zombie waiting to be reaped)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def touch(path: str | Path, text: str = "x") -> None:
    """Append ``text`` to ``path``."""
    with open(path, "a") as handle:
        handle.write(text)


# -- the functions launched ------------------------------------------------------------------


def rank_info() -> dict[str, Any]:
    """Where this worker sits, after one all_reduce over the whole group."""
    state = PartialState()
    total = torch.tensor([float(state.process_index)])
    dist.all_reduce(total)
    if state.local_process_index == 0:
        time.sleep(0.2)  # the first rank finishes last: results must still come back in order
    return {
        "rank": state.process_index,
        "local_rank": state.local_process_index,
        "world": state.num_processes,
        "sum": total.item(),
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "fork_launched": state.fork_launched,
        "port": os.environ.get("MASTER_PORT"),
    }


def quick_info() -> tuple[int, float, str]:
    """Rank, the sum of all ranks (one all_reduce) and MASTER_PORT, without delay."""
    state = PartialState()
    total = torch.tensor([float(state.process_index)])
    dist.all_reduce(total)
    return state.process_index, total.item(), os.environ["MASTER_PORT"]


def local_rank_env() -> int:
    """The LOCAL_RANK the launcher gave this worker (no process group)."""
    return int(os.environ["LOCAL_RANK"])


def precisions() -> tuple[str, str]:
    """PartialState's and AcceleratorState's mixed precision in this worker."""
    from nbaccel import AcceleratorState

    return PartialState().mixed_precision, AcceleratorState().mixed_precision


def big_tensor(seed: int) -> torch.Tensor:
    """200 MiB of float32 noise, the same for the same seed."""
    return torch.rand(BIG_ELEMENTS, generator=torch.Generator().manual_seed(seed))


def big_array(seed: int) -> np.ndarray:
    """200 MiB of float32 noise, the same for the same seed."""
    return np.random.default_rng(seed).random(BIG_ELEMENTS, dtype=np.float32)


def big_payload() -> dict[str, Any]:
    """A 200 MiB tensor and a 200 MiB array (seeded by rank), with checksums made here."""
    rank = PartialState().process_index
    tensor, array = big_tensor(rank), big_array(100 + rank)
    return {
        "rank": rank,
        "tensor": tensor,
        "array": array,
        "tensor_sum": float(tensor.sum(dtype=torch.float64)),
        "array_sum": float(array.sum(dtype=np.float64)),
    }


def return_generator() -> Any:
    """A generator: cannot be pickled."""
    return (i for i in range(3))


def return_lock() -> Any:
    """A lock: cannot be pickled."""
    return threading.Lock()


@dataclass(frozen=True)
class CustomEvent(Event):
    """A user-defined event type."""

    note: str = ""


def send_events() -> bool:
    """Report progress, metrics and a custom event; True when every call was delivered."""
    state = PartialState()
    ok = report_progress(1, total=10, desc="train")
    ok &= report_metrics({"loss": 0.25 * (state.process_index + 1)}, step=3)
    ok &= emit(CustomEvent(rank=state.process_index, note=f"hello from {state.process_index}"))
    return bool(ok)


def fail_after_peers_wait(failing: int, marker_dir: str) -> None:
    """Rank ``failing`` raises ValueError once every other rank is inside an all_reduce."""
    state = PartialState()
    if state.process_index != failing:
        touch(Path(marker_dir) / f"entered{state.process_index}")
        dist.all_reduce(torch.ones(1))  # never completes: the failing rank never joins
        return
    others = state.num_processes - 1
    deadline = time.monotonic() + 30
    while len(list(Path(marker_dir).glob("entered*"))) < others:
        if time.monotonic() > deadline:
            raise RuntimeError("the other ranks never reached the all_reduce")
        time.sleep(0.02)
    time.sleep(0.3)  # they are blocked inside the collective now
    raise ValueError(f"boom {failing}")


def fail_while_peers_ignore_sigterm(failing: int, marker_dir: str, in_collective: bool) -> None:
    """Like :func:`fail_after_peers_wait`, but the peers ignore SIGTERM: they either fail in
    the collective because the failing rank left (``in_collective``), or sleep until the
    launcher escalates to SIGKILL."""
    if int(os.environ["RANK"]) != failing:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if not in_collective:
            PartialState()
            touch(Path(marker_dir) / f"entered{os.environ['RANK']}")
            time.sleep(1000)
    fail_after_peers_wait(failing, marker_dir)


class NeedsTwoArgs(Exception):
    """Pickles, but cannot be re-created from its args (``__init__`` needs two)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class HoldsLock(Exception):
    """Cannot be pickled at all: it holds a lock."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


def raise_needs_two_args() -> None:
    """Rank 1 raises NeedsTwoArgs; rank 0 returns."""
    if int(os.environ["RANK"]) == 1:
        raise NeedsTwoArgs("cannot rebuild me", 7)


def raise_holds_lock() -> None:
    """Rank 1 raises HoldsLock; rank 0 returns."""
    if int(os.environ["RANK"]) == 1:
        raise HoldsLock("cannot pickle me")


def die_in_barrier(how: str) -> None:
    """Rank 1 dies (``how``: 'sigkill' or 'exit3') while rank 0 waits in a barrier."""
    state = PartialState()
    if state.process_index == 1:
        time.sleep(0.2)
        if how == "sigkill":
            os.kill(os.getpid(), 9)
        os._exit(3)
    dist.barrier()


def hang_on_rank_one() -> int:
    """Rank 1 sleeps for a long time; rank 0 returns at once."""
    rank = int(os.environ["RANK"])
    if rank == 1:
        time.sleep(1000)
    return rank


def sleep_forever() -> None:
    """Sleep (until the launcher stops this worker)."""
    print(f"WORKER-PID {os.getpid()}", flush=True)
    time.sleep(1000)


def fail_first_attempt(marker_dir: str) -> dict[str, int]:
    """Rank 1 raises on the first attempt only; every rank records its attempts."""
    state = PartialState()
    touch(Path(marker_dir) / f"attempts{state.process_index}")
    if state.restart_count == 0 and state.process_index == 1:
        raise ValueError("first attempt fails")
    dist.barrier()
    return {"rank": state.process_index, "restart_count": state.restart_count}


def fail_every_attempt(marker_dir: str) -> None:
    """Rank 1 raises on every attempt (after counting it); rank 0 waits in a barrier."""
    state = PartialState()
    if state.process_index == 1:
        touch(Path(marker_dir) / "attempts")
        raise ValueError(f"attempt {state.restart_count} fails")
    dist.barrier()


def listening_sockets() -> dict[str, Any]:
    """Listening TCP sockets of the launcher's process and of this worker, while the group
    is up (after a gloo collective, so gloo's own sockets exist)."""
    PartialState()
    dist.all_reduce(torch.ones(1))

    def listening(proc: psutil.Process) -> list[tuple[str, int]]:
        return [
            (conn.laddr.ip, conn.laddr.port)
            for conn in proc.net_connections(kind="inet")
            if conn.status == psutil.CONN_LISTEN
        ]

    launcher = listening(psutil.Process(os.getppid()))
    mine = listening(psutil.Process())
    dist.barrier()  # every rank looked before anyone leaves
    return {
        "launcher": launcher,
        "worker": mine,
        "ppid": os.getppid(),
        "master_port": int(os.environ["MASTER_PORT"]),
    }


def launch(function: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
    """notebook_launcher with fork and 2 processes unless told otherwise."""
    kwargs.setdefault("num_processes", 2)
    kwargs.setdefault("start_method", "fork")
    return notebook_launcher(function, args, **kwargs)


def assert_clean_then_next_launch_works(baseline: set[int]) -> None:
    """No worker outlives a launch, and the next launch in this process works."""
    left = wait_no_children(baseline)
    assert not left, f"worker processes left behind: {sorted(left)}"
    assert launch(local_rank_env) == [0, 1]
    left = wait_no_children(baseline)
    assert not left, f"worker processes left behind after the next launch: {sorted(left)}"


def sys_exit_on_rank_one(code: int) -> int:
    """Rank 1 calls sys.exit(code) (as a script's argument check would); rank 0 returns."""
    rank = int(os.environ["RANK"])
    if rank == 1:
        sys.exit(code)
    return rank


def sys_exit_on_first_attempt() -> int:
    """Rank 1 calls sys.exit(2) on the first attempt only; returns the restart count."""
    state = PartialState()
    if state.restart_count == 0 and state.process_index == 1:
        sys.exit(2)
    return state.restart_count


def session_ids() -> tuple[int, int]:
    """This worker's session id and process group id."""
    return os.getsid(0), os.getpgrp()
