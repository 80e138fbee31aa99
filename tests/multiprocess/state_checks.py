"""Rank-side checks of the nbaccel state over one real gloo process group (run once per rank)."""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from nbaccel import AcceleratorState, DistributedType, PartialState, set_seed
from nbaccel.state.registry import current_process
from nbaccel.testing import reset_state

CHECKS: list[Callable[[Path], None]] = []

# Which input positions each rank receives for five items, written out by hand.
FIVE_ITEMS = {2: [[0, 1, 2], [3, 4]], 3: [[0, 1], [2, 3], [4]]}
# One item, more processes than items.
ONE_ITEM = {2: [[0], []], 3: [[0], [], []]}

EXPECTED_PRECISION = "bf16"  # NBACCEL_MIXED_PRECISION set by the test in every rank
EXPECTED_RESTARTS = 2  # NBACCEL_RESTART_COUNT set by the test in every rank


def check(function: Callable[[Path], None]) -> Callable[[Path], None]:
    """Register a check; checks run in the order they are defined."""
    CHECKS.append(function)
    return function


def gather(value: Any) -> list[Any]:
    """``value`` from every rank, in rank order."""
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def env_int(name: str) -> int:
    return int(os.environ[name])


def padded(indices: list[int], pad_len: int, total: int) -> list[int]:
    """Expected padded positions: the share, then its last element (or the input's) repeated."""
    last = indices[-1:] or [total - 1]
    return indices + last * (pad_len - len(indices))


# --- attributes -------------------------------------------------------------------------------


@check
def attributes(_: Path) -> None:
    state = PartialState()
    rank, world = env_int("RANK"), env_int("WORLD_SIZE")
    local, local_world = env_int("LOCAL_RANK"), env_int("LOCAL_WORLD_SIZE")
    assert state.process_index == rank == dist.get_rank(), state.process_index
    assert state.num_processes == world == dist.get_world_size(), state.num_processes
    assert state.local_process_index == local, state.local_process_index
    assert state.local_num_processes == local_world, state.local_num_processes
    assert state.is_main_process is (rank == 0)
    assert state.is_last_process is (rank == world - 1)
    assert state.is_local_main_process is (local == 0)
    assert state.device == torch.device("cpu"), state.device
    assert state.distributed_type == DistributedType.MULTI_CPU, state.distributed_type
    assert state.backend == "gloo", state.backend
    assert dist.get_backend() == "gloo"
    assert state.use_distributed is True
    assert state.initialized is True
    assert state.debug is False
    assert state.fork_launched is False
    assert state.mixed_precision == EXPECTED_PRECISION, state.mixed_precision
    assert current_process().owns_process_group is True
    assert current_process().launch.launcher == "env"
    indexes = gather((state.process_index, state.local_process_index, state.is_main_process))
    assert [i for i, _, _ in indexes] == list(range(world)), indexes
    assert sum(1 for _, _, main in indexes if main) == 1, indexes


@check
def new_state_adopts_the_process_group(_: Path) -> None:
    reset_state()
    state = PartialState(cpu=True)
    assert dist.is_initialized()
    assert current_process().owns_process_group is False
    assert state.process_index == env_int("RANK")
    assert state.num_processes == env_int("WORLD_SIZE")
    assert state.distributed_type == DistributedType.MULTI_CPU
    assert state.backend == "gloo"
    acc = AcceleratorState()
    assert acc.process_index == state.process_index
    assert acc.distributed_type == DistributedType.MULTI_CPU
    reset_state()


# --- split_between_processes ------------------------------------------------------------------


def _split_case(inputs: Any, table: dict[int, list[list[int]]], length: int) -> None:
    state = PartialState()
    world, rank = state.num_processes, state.process_index
    mine = table[world][rank]
    pad_len = math.ceil(length / world) if length else 0
    with state.split_between_processes(inputs) as share:
        plain = share
    with AcceleratorState().split_between_processes(inputs, apply_padding=True) as share:
        padded_share = share
    expected_plain = _take(inputs, mine)
    expected_padded = _take(inputs, padded(mine, pad_len, length))
    _assert_same(plain, expected_plain, "plain share")
    _assert_same(padded_share, expected_padded, "padded share")
    plains = gather(plain)
    paddeds = gather(padded_share)
    _assert_same(_concat(plains, inputs), inputs, "plain shares joined")
    assert len({_len(p) for p in paddeds}) == 1, [_len(p) for p in paddeds]
    assert _len(paddeds[0]) == pad_len
    for i, (p, q) in enumerate(zip(plains, paddeds, strict=True)):
        _assert_same(_take(q, list(range(_len(p)))), p, f"rank {i} padded prefix")


def _take(value: Any, positions: list[int]) -> Any:
    if isinstance(value, dict):
        return {k: _take(v, positions) for k, v in value.items()}
    if isinstance(value, torch.Tensor):
        return value[torch.tensor(positions, dtype=torch.long)]
    picked = [value[i] for i in positions]
    return tuple(picked) if isinstance(value, tuple) else picked


def _concat(pieces: list[Any], like: Any) -> Any:
    if isinstance(like, dict):
        return {k: _concat([p[k] for p in pieces], v) for k, v in like.items()}
    if isinstance(like, torch.Tensor):
        return torch.cat(pieces, dim=0)
    joined = [x for p in pieces for x in p]
    return tuple(joined) if isinstance(like, tuple) else joined


def _len(value: Any) -> int:
    if isinstance(value, dict):
        lengths = {_len(v) for v in value.values()}
        assert len(lengths) == 1, lengths
        return lengths.pop()
    return len(value)


def _assert_same(got: Any, expected: Any, what: str) -> None:
    assert type(got) is type(expected), f"{what}: {type(got).__name__} != {type(expected)}"
    if isinstance(expected, dict):
        assert list(got) == list(expected), f"{what}: keys {list(got)}"
        for k in expected:
            _assert_same(got[k], expected[k], f"{what}[{k!r}]")
    elif isinstance(expected, torch.Tensor):
        assert torch.equal(got, expected), f"{what}: {got.tolist()} != {expected.tolist()}"
    else:
        assert got == expected, f"{what}: {got!r} != {expected!r}"


@check
def split_list(_: Path) -> None:
    _split_case(["a", "b", "c", "d", "e"], FIVE_ITEMS, 5)


@check
def split_tuple(_: Path) -> None:
    _split_case(("a", "b", "c", "d", "e"), FIVE_ITEMS, 5)


@check
def split_dict(_: Path) -> None:
    data = {"text": ["a", "b", "c", "d", "e"], "ids": torch.arange(5), "pos": (0, 1, 2, 3, 4)}
    _split_case(data, FIVE_ITEMS, 5)


@check
def split_tensor(_: Path) -> None:
    _split_case(torch.arange(10).reshape(5, 2), FIVE_ITEMS, 5)


@check
def split_fewer_items_than_processes(_: Path) -> None:
    _split_case(["only"], ONE_ITEM, 1)
    _split_case(torch.tensor([[7.0, 8.0]]), ONE_ITEM, 1)


@check
def split_padded_tensors_all_gather(_: Path) -> None:
    state = PartialState()
    data = torch.arange(7, dtype=torch.float32) * 10
    with state.split_between_processes(data, apply_padding=True) as share:
        pieces = [torch.empty_like(share) for _ in range(state.num_processes)]
        dist.all_gather(pieces, share)  # needs equal shapes on every rank
    joined = torch.cat(pieces)
    assert len(joined) == math.ceil(7 / state.num_processes) * state.num_processes
    unique_in_order = list(dict.fromkeys(joined.tolist()))
    assert unique_in_order == data.tolist(), joined.tolist()


# --- ordering ---------------------------------------------------------------------------------


def _append(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _ordering(out_dir: Path, name: str, local: bool) -> None:
    state = PartialState()
    log = out_dir / f"{name}.log"
    first = state.is_local_main_process if local else state.is_main_process
    me = state.process_index
    dist.barrier()
    block = state.local_main_process_first() if local else state.main_process_first()
    with block:
        _append(log, f"enter {me}")
        if first:
            time.sleep(0.5)  # others would enter meanwhile if they did not wait
        _append(log, f"exit {me}")
    state.wait_for_everyone()
    lines = log.read_text().splitlines()
    world = state.num_processes
    assert sorted(lines) == sorted(
        [f"enter {r}" for r in range(world)] + [f"exit {r}" for r in range(world)]
    ), lines
    assert lines[:2] == ["enter 0", "exit 0"], lines


@check
def main_process_first(out_dir: Path) -> None:
    _ordering(out_dir, "main_process_first", local=False)


@check
def local_main_process_first(out_dir: Path) -> None:
    _ordering(out_dir, "local_main_process_first", local=True)


# --- decorators -------------------------------------------------------------------------------


def _ran_on(decorated: Callable[[], Any]) -> list[int]:
    result = decorated()
    ran = gather(result)
    for rank, value in enumerate(ran):
        assert value in (None, rank), (rank, value)
    return [rank for rank, value in enumerate(ran) if value is not None]


@check
def decorators(_: Path) -> None:
    state = PartialState()
    world, local_world = state.num_processes, state.local_num_processes

    def me() -> int:
        return state.process_index

    assert _ran_on(state.on_main_process(me)) == [0]
    assert _ran_on(state.on_local_main_process(me)) == [0]
    assert _ran_on(state.on_last_process(me)) == [world - 1]
    for k in range(world):
        assert _ran_on(state.on_process(process_index=k)(me)) == [k], k
        assert _ran_on(state.on_process(me, process_index=k)) == [k], k
    for k in range(local_world):
        assert _ran_on(state.on_local_process(local_process_index=k)(me)) == [k], k


@check
def decorator_index_out_of_range(_: Path) -> None:
    state = PartialState()
    for bad in (state.num_processes, state.num_processes + 3, -1):
        try:
            state.on_process(process_index=bad)
        except ValueError as error:
            assert "process_index" in str(error), error
        else:
            raise AssertionError(f"on_process(process_index={bad}) did not raise")
    try:
        state.on_local_process(local_process_index=state.local_num_processes)
    except ValueError:
        pass
    else:
        raise AssertionError("on_local_process(local_process_index=<too big>) did not raise")
    try:
        state.on_process(process_index="1")
    except TypeError:
        pass
    else:
        raise AssertionError('on_process(process_index="1") did not raise TypeError')


# --- synchronisation --------------------------------------------------------------------------


@check
def wait_for_everyone_waits(_: Path) -> None:
    state = PartialState()
    dist.barrier()
    start = time.monotonic()
    if state.is_main_process:
        time.sleep(1.5)
    state.wait_for_everyone()
    waited = time.monotonic() - start
    assert waited >= 1.2, f"rank {state.process_index} waited only {waited:.2f}s"


@check
def destroy_explicit_group(_: Path) -> None:
    state = PartialState()
    group = dist.new_group(ranks=list(range(state.num_processes)))
    total = torch.ones(1)
    dist.all_reduce(total, group=group)
    assert total.item() == state.num_processes
    state.destroy_process_group(group)
    try:
        dist.get_rank(group)
    except (ValueError, RuntimeError, KeyError):
        pass
    else:
        raise AssertionError("the explicit group still exists after destroy_process_group(group)")
    assert dist.is_initialized(), "destroying an explicit group destroyed the default group"
    state.wait_for_everyone()
    total = torch.ones(1)
    dist.all_reduce(total)
    assert total.item() == state.num_processes


# --- seeding, precision, restarts -------------------------------------------------------------


def _draws() -> tuple[list[float], float, float]:
    return torch.rand(4).tolist(), random.random(), float(np.random.rand())


@check
def set_seed_device_specific(_: Path) -> None:
    state = PartialState()
    set_seed(42, device_specific=True)
    mine = _draws()
    set_seed(42 + state.process_index)
    assert _draws() == mine
    everyone = gather(mine)
    for i in range(len(everyone)):
        for j in range(i + 1, len(everyone)):
            for a, b in zip(everyone[i], everyone[j], strict=True):
                assert a != b, (i, j, a)


@check
def set_seed_same_everywhere(_: Path) -> None:
    set_seed(42)
    everyone = gather(_draws())
    assert all(d == everyone[0] for d in everyone), everyone


@check
def mixed_precision_from_launcher(_: Path) -> None:
    reset_state()
    acc = AcceleratorState()
    assert acc.mixed_precision == EXPECTED_PRECISION, acc.mixed_precision
    assert PartialState().mixed_precision == EXPECTED_PRECISION
    assert acc.distributed_type == DistributedType.MULTI_CPU
    reset_state()
    assert AcceleratorState(mixed_precision="fp16").mixed_precision == "fp16"
    reset_state()


@check
def restart_count_from_launcher(_: Path) -> None:
    reset_state()
    state = PartialState()
    assert state.restart_count == EXPECTED_RESTARTS, state.restart_count
    assert gather(state.restart_count) == [EXPECTED_RESTARTS] * state.num_processes


@check
def destroy_default_group(_: Path) -> None:
    """Must stay last: it tears down the process group the other checks share."""
    state = PartialState()
    state.wait_for_everyone()
    state.destroy_process_group()
    assert not dist.is_initialized()


# --- runner -----------------------------------------------------------------------------------


def _write(path: Path, results: dict[str, str]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1))
    os.replace(tmp, path)


def main() -> int:
    """Create the process group through PartialState, run every check, record the outcomes."""
    out_dir = Path(sys.argv[1])
    rank = env_int("RANK")
    result_file = out_dir / f"rank{rank}.json"
    results: dict[str, str] = {}
    PartialState(timeout=timedelta(seconds=60))
    for function in CHECKS:
        name = function.__name__
        print(f"[rank {rank}] {name}", flush=True)
        try:
            function(out_dir)
            results[name] = "ok"
        except BaseException:
            results[name] = traceback.format_exc()
        _write(result_file, results)
        if dist.is_initialized():
            dist.barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main())
