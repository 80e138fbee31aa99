"""Rank-side checks of nbaccel.ops over one real gloo process group (every rank runs them all)."""

from __future__ import annotations

import traceback
from collections import OrderedDict, namedtuple
from collections.abc import Callable
from typing import Any

import torch

from nbaccel import PartialState
from nbaccel.ops import (
    broadcast,
    broadcast_object_list,
    gather,
    gather_object,
    pad_across_processes,
    reduce,
)

CHECKS: list[Callable[[], None]] = []
Pair = namedtuple("Pair", ["left", "right"])


def check(function: Callable[[], None]) -> Callable[[], None]:
    """Register a check; checks run in the order they are defined."""
    CHECKS.append(function)
    return function


def run_all_checks() -> dict[str, str]:
    """Run every check on this rank: ``{check name: "ok" or the traceback}``."""
    results = {}
    for function in CHECKS:
        try:
            function()
            results[function.__name__] = "ok"
        except BaseException:
            results[function.__name__] = traceback.format_exc()
    return results


def where() -> tuple[int, int]:
    """(rank, world size)."""
    state = PartialState()
    return state.process_index, state.num_processes


def rows(rank: int, n: int = 2, width: int = 3) -> torch.Tensor:
    """An ``n x width`` tensor whose values say which rank made it."""
    return torch.arange(n * width, dtype=torch.float32).reshape(n, width) + 100 * rank


def expected_rows(world: int, n: int = 2, width: int = 3) -> torch.Tensor:
    return torch.cat([rows(r, n, width) for r in range(world)])


def raises(kind: type[Exception], function: Callable[[], Any]) -> str:
    """The message of the ``kind`` error that ``function()`` raises (AssertionError if none)."""
    try:
        function()
    except kind as error:
        return str(error)
    raise AssertionError(f"{kind.__name__} was not raised")


def next_collective_works() -> None:
    """A gather right after an error still works: no rank is stuck in a collective."""
    rank, world = where()
    assert gather(torch.tensor([rank])).tolist() == list(range(world))


# --- gather ----------------------------------------------------------------------------------


@check
def gather_tensor() -> None:
    rank, world = where()
    out = gather(rows(rank))
    torch.testing.assert_close(out, expected_rows(world))
    ints = gather(torch.tensor([rank, -rank]))
    assert ints.dtype == torch.int64 and ints.tolist() == [v for r in range(world) for v in (r, -r)]
    flags = gather(torch.tensor([rank % 2 == 0]))
    assert flags.tolist() == [r % 2 == 0 for r in range(world)]


@check
def gather_nested_keeps_types() -> None:
    rank, world = where()
    data = OrderedDict(
        x=rows(rank), parts=[rows(rank, 1), (rows(rank, 3, 2), Pair(rows(rank, 1, 1), rows(rank)))]
    )
    out = gather(data)
    assert type(out) is OrderedDict and list(out) == ["x", "parts"]
    assert type(out["parts"]) is list and type(out["parts"][1]) is tuple
    pair = out["parts"][1][1]
    assert type(pair) is Pair
    torch.testing.assert_close(out["x"], expected_rows(world))
    torch.testing.assert_close(out["parts"][0], expected_rows(world, 1))
    torch.testing.assert_close(out["parts"][1][0], expected_rows(world, 3, 2))
    torch.testing.assert_close(pair.left, expected_rows(world, 1, 1))


@check
def gather_scalars() -> None:
    rank, world = where()
    out = gather({"loss": torch.tensor(float(rank) / 2)})
    assert out["loss"].shape == (world,)
    assert out["loss"].tolist() == [r / 2 for r in range(world)]


@check
def gather_mixed_dtypes_in_one_call() -> None:
    """Several tensors of different dtypes and ranks (sent as one buffer) come back as if each
    had been gathered alone, every process's rows in process order."""
    rank, world = where()
    data = {
        "logits": torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * rank,
        "labels": torch.tensor([rank, -rank, 7], dtype=torch.int64),
        "mask": torch.tensor([rank % 2 == 0, True]),
        "half": torch.full((1, 2), rank + 0.5, dtype=torch.bfloat16),
        "loss": torch.tensor(rank * 1.5, dtype=torch.float64, requires_grad=True),
        "empty": torch.zeros(0, 4, dtype=torch.int16),
    }
    out = gather(data)
    logits = torch.cat([torch.arange(6.0).reshape(2, 3) + 10 * r for r in range(world)])
    assert torch.equal(out["logits"], logits)
    assert out["labels"].tolist() == [v for r in range(world) for v in (r, -r, 7)]
    assert out["mask"].dtype == torch.bool
    assert out["mask"].tolist() == [v for r in range(world) for v in (r % 2 == 0, True)]
    assert out["half"].dtype == torch.bfloat16 and out["half"].shape == (world, 2)
    assert out["half"][:, 0].tolist() == [r + 0.5 for r in range(world)]
    assert out["loss"].dtype == torch.float64 and out["loss"].tolist() == [
        r * 1.5 for r in range(world)
    ]
    assert out["empty"].shape == (0, 4) and out["empty"].dtype == torch.int16


@check
def gather_large_and_small_together() -> None:
    """Small tensors travel with the layout check, large ones in their own collective (one, or
    one fused for several): every result is as if each tensor had been gathered alone."""
    rank, world = where()

    def mine(r: int) -> tuple[torch.Tensor, ...]:
        big = torch.arange(3000, dtype=torch.float32).reshape(1000, 3) + r  # 12 kB
        return big, torch.tensor([r, 2 * r]), big[:4, :2].t(), big * 2, torch.tensor(r * 1.0)

    out = gather(mine(rank))
    for index, tensor in enumerate(out):
        parts = [mine(r)[index] for r in range(world)]
        expected = torch.stack(parts) if parts[0].ndim == 0 else torch.cat(parts)
        assert torch.equal(tensor, expected), index
    alone = gather(mine(rank)[:2])  # one large, one small
    assert torch.equal(alone[0], torch.cat([mine(r)[0] for r in range(world)]))


@check
def gather_many_tensors() -> None:
    """More tensors than fit in one small layout exchange (the second round)."""
    rank, world = where()
    out = gather([torch.full((1, 2), float(rank + i)) for i in range(40)])
    assert len(out) == 40
    for i, tensor in enumerate(out):
        assert tensor[:, 0].tolist() == [float(r + i) for r in range(world)]


def _count_collectives(function: Callable[[], Any]) -> tuple[Any, int]:
    """``function()`` and how many all_gathers it ran."""
    import torch.distributed as dist

    names = [
        n for n in ("all_gather", "all_gather_into_tensor", "all_gather_single") if hasattr(dist, n)
    ]
    originals = {name: getattr(dist, name) for name in names}
    calls = [0]

    def counted(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            return original(*args, **kwargs)

        return call

    for name in names:
        setattr(dist, name, counted(originals[name]))
    try:
        return function(), calls[0]
    finally:
        for name, original in originals.items():
            setattr(dist, name, original)


def _batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """An evaluation batch: ``(8, length, 16)`` float predictions (lengths differ by rank and
    step, about 20 kB) and their ``(8,)`` lengths."""
    length = 20 + (step + rank) % 5
    predictions = torch.arange(8 * length * 16, dtype=torch.float32).reshape(8, length, 16)
    return predictions + 1000 * rank + step, torch.full((8,), length + 100 * rank)


@check
def gather_loop_sends_data_with_the_layout_check() -> None:
    """In a loop of pad_across_processes and gather, the room predicted for the gather's data
    in its layout check fits it: one collective per call, the results stay intact."""
    rank, world = where()
    kept = []
    for step in range(8):
        predictions, lengths = _batch(rank, step)
        padded = pad_across_processes(predictions, dim=1)
        (out, out_lengths), calls = _count_collectives(lambda: gather((padded, lengths)))  # noqa: B023
        if step >= 5:
            assert calls == 1, (step, calls)
        kept.append((step, out, out_lengths))
    for step, out, out_lengths in kept:  # not overwritten by the later gathers
        parts = [_batch(r, step) for r in range(world)]
        longest = max(p.shape[1] for p, _ in parts)
        expected = torch.cat([pad_one(p, longest) for p, _ in parts])
        assert torch.equal(out, expected), step
        assert torch.equal(out_lengths, torch.cat([lengths for _, lengths in parts])), step
    mine = torch.zeros(8, 24 + rank, 16)  # the same room, shapes that differ: a clear error
    message = raises(ValueError, lambda: gather((mine, torch.zeros(8))))
    assert "process 0: [8, 24, 16]" in message and "pad_across_processes" in message, message
    next_collective_works()


def pad_one(tensor: torch.Tensor, length: int) -> torch.Tensor:
    """``tensor`` padded with zeros along dim 1 to ``length``."""
    out = torch.zeros(tensor.shape[0], length, *tensor.shape[2:], dtype=tensor.dtype)
    out[:, : tensor.shape[1]] = tensor
    return out


@check
def other_operation_after_a_gather_loop_is_a_mismatch() -> None:
    """After a loop that made the layout check's row large, a process in another operation
    still gets CollectiveMismatchError on every process (every row has the same size)."""
    from nbaccel.state.handshake import CollectiveMismatchError

    rank, _ = where()
    data = _batch(0, 0)  # the same shapes on every process
    for _ in range(6):
        gather(data)
        reduce(torch.ones(2))
    call = (lambda: gather(data)) if rank == 0 else (lambda: reduce(torch.ones(2)))
    message = raises(CollectiveMismatchError, call)
    assert "process 0: gather" in message and "process 1: reduce" in message, message
    next_collective_works()


@check
def gather_object_lists_and_objects() -> None:
    rank, world = where()
    assert gather_object([rank, f"r{rank}"]) == [v for r in range(world) for v in (r, f"r{r}")]
    assert gather_object({"rank": rank}) == [{"rank": r} for r in range(world)]


# --- pad_across_processes --------------------------------------------------------------------


@check
def pad_dim0_then_gather() -> None:
    rank, world = where()
    mine = torch.arange(rank + 1) + 10 * rank
    padded = pad_across_processes(mine)
    assert padded.shape == (world,)
    assert padded.tolist() == mine.tolist() + [0] * (world - rank - 1)
    first = pad_across_processes(mine, pad_index=-1, pad_first=True)
    assert first.tolist() == [-1] * (world - rank - 1) + mine.tolist()
    out = gather(padded)
    expected = []
    for r in range(world):
        expected += [10 * r + i for i in range(r + 1)] + [0] * (world - r - 1)
    assert out.tolist() == expected


@check
def pad_dim1_nested() -> None:
    rank, world = where()
    data: dict[str, Any] = {
        "ids": torch.ones(2, rank + 1, dtype=torch.long),
        "mask": [torch.ones(rank + 2)],
    }
    padded = pad_across_processes(data, dim=1, pad_index=7)
    assert padded["ids"].shape == (2, world)
    assert padded["ids"][:, rank + 1 :].eq(7).all() and padded["ids"][:, : rank + 1].eq(1).all()
    assert torch.equal(padded["mask"][0], data["mask"][0])  # 1-d: no dim 1, left as it is
    last = pad_across_processes(data["ids"], dim=-1, pad_first=True)
    assert last.shape == (2, world) and last[:, : world - rank - 1].eq(0).all()
    out = gather(padded["ids"])
    assert out.shape == (2 * world, world)


# --- reduce ----------------------------------------------------------------------------------


@check
def reduce_sum_mean_scale() -> None:
    rank, world = where()
    mine = torch.tensor([1.0, float(rank)])
    total = float(sum(range(world)))
    assert reduce(mine, "sum").tolist() == [world, total]
    torch.testing.assert_close(reduce(mine), torch.tensor([1.0, total / world]))
    assert reduce(mine, "none").tolist() == [world, total]
    assert reduce(mine, "sum", scale=0.5).tolist() == [world / 2, total / 2]
    assert mine.tolist() == [1.0, float(rank)], "reduce modified its input"
    nested = reduce({"n": torch.tensor(rank + 1), "v": [torch.ones(2)]}, reduction="sum")
    assert nested["n"].item() == sum(r + 1 for r in range(world))
    assert nested["v"][0].tolist() == [world, world]
    mean_int = reduce(torch.tensor([rank]))
    assert mean_int.is_floating_point() and mean_int.item() == total / world


@check
def reduce_max_and_min() -> None:
    rank, world = where()
    mine = {"a": torch.tensor([float(rank), -float(rank)]), "b": [torch.tensor(rank * 10)]}
    high, low = reduce(mine, "max"), reduce(mine, reduction="min")
    assert high["a"].tolist() == [world - 1, 0] and high["b"][0].item() == (world - 1) * 10
    assert low["a"].tolist() == [0, -(world - 1)] and low["b"][0].item() == 0
    assert reduce(torch.tensor([rank]), "max", scale=2.0).item() == 2 * (world - 1)
    assert mine["a"].tolist() == [rank, -rank], "reduce modified its input"


# --- broadcast -------------------------------------------------------------------------------


@check
def broadcast_from_every_rank() -> None:
    rank, world = where()
    for source in range(world):
        data: dict[str, Any] = {"w": torch.full((2, 3), float(rank)), "t": (torch.tensor(rank),)}
        out = broadcast(data, from_process=source)
        assert out is data
        assert out["w"].eq(source).all() and out["t"][0].item() == source
        strided = torch.full((3, 2), float(rank)).t()  # not contiguous
        assert broadcast(strided, source).eq(source).all() and strided.eq(source).all()


@check
def broadcast_object_list_from_every_rank() -> None:
    rank, world = where()
    for source in range(world):
        items: list[Any] = [{"from": rank}, f"rank{rank}"] if rank == source else [None, None]
        out = broadcast_object_list(items, from_process=source)
        assert out is items and items == [{"from": source}, f"rank{source}"]


# --- errors: every rank raises, then the group still works -------------------------------------


@check
def gather_shape_mismatch_is_an_error() -> None:
    rank, world = where()
    mine = torch.zeros(2, 3 if rank == 0 else 4)
    message = raises(ValueError, lambda: gather({"logits": mine}))
    assert "data['logits']" in message, message
    assert "process 0: [2, 3]" in message and f"process {world - 1}: [2, 4]" in message, message
    assert "pad_across_processes(data, dim=1)" in message, message
    next_collective_works()


@check
def gather_dim0_mismatch_is_an_error() -> None:
    rank, world = where()
    message = raises(ValueError, lambda: gather(torch.zeros(rank + 1, 2)))
    for r in range(world):
        assert f"process {r}: [{r + 1}, 2]" in message, message
    assert "pad_across_processes(data, dim=0)" in message, message
    next_collective_works()


@check
def structure_and_dtype_mismatch_are_errors() -> None:
    rank, _ = where()
    count = [torch.ones(1)] * (1 if rank == 0 else 2)
    assert "number of tensors" in raises(ValueError, lambda: gather(count))
    mixed = torch.ones(2, dtype=torch.float32 if rank == 0 else torch.float64)
    message = raises(ValueError, lambda: reduce(mixed))
    assert "float32" in message and "float64" in message, message
    ndim = torch.ones(2) if rank == 0 else torch.ones(2, 1)
    assert "number of dimensions" in raises(ValueError, lambda: pad_across_processes(ndim))
    next_collective_works()


@check
def non_tensor_on_one_rank_is_an_error_everywhere() -> None:
    rank, _ = where()
    data = {"x": torch.ones(1), "name": "abc" if rank == 1 else torch.ones(1)}
    message = raises(TypeError, lambda: gather(data))
    if rank == 1:
        assert "data['name'] (str)" in message, message
    else:
        assert "process(es) [1]" in message, message
    next_collective_works()


@check
def broadcast_mismatches_are_errors() -> None:
    rank, world = where()
    message = raises(ValueError, lambda: broadcast(torch.zeros(rank + 1), from_process=0))
    assert "process 0: [1]" in message and "process 1: [2]" in message, message
    assert "broadcast_object_list" in message, message
    lengths = [None] * (rank + 1)
    message = raises(ValueError, lambda: broadcast_object_list(lengths))
    assert "lengths differ" in message, message
    message = raises(ValueError, lambda: broadcast(torch.zeros(1), from_process=world))
    assert f"broadcast(from_process={world})" in message and f"0..{world - 1}" in message, message
    next_collective_works()
