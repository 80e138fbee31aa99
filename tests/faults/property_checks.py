"""Property-based checks of split_between_processes, pad_across_processes and
gather_for_metrics, run inside every rank of one launch (one process group per world size).

Hypothesis runs derandomized, so every rank draws the same examples; each example's verdict
is gathered from every rank before it passes or fails, so the ranks stay in step even while
hypothesis shrinks a failing example.
"""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from nbaccel import Accelerator
from nbaccel.utils import gather_object

EXAMPLES = 25
_SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


def _agree(problem: str | None) -> None:
    """Fail on every rank when any rank found a problem."""
    problems = [p for p in gather_object([problem]) if p]
    assert not problems, problems


def check_split(acc: Accelerator) -> None:
    """Shares are contiguous, in rank order, cover the input once (or pad it evenly)."""

    def share_of(data: Any, kind: str, padding: bool) -> list[int] | None:
        with acc.split_between_processes(data, apply_padding=padding) as share:
            mine = share["a"] if kind == "dict" else share
            mine = [int(v) for v in (mine.flatten().tolist() if kind == "tensor" else mine)]
            if kind == "dict" and [int(v) for v in share["b"].tolist()] != mine:
                return None
        return mine

    @_SETTINGS
    @given(length=st.integers(0, 40), kind=st.sampled_from(["list", "tensor", "dict"]))
    def prop(length: int, kind: str) -> None:
        data: Any = list(range(length))
        if kind == "tensor":
            data = torch.arange(length).reshape(length, 1)
        elif kind == "dict":
            data = {"a": list(range(length)), "b": torch.arange(length)}
        plain, padded = share_of(data, kind, False), share_of(data, kind, True)
        shares = gather_object([(plain, padded)])
        problem = None
        if any(p is None or q is None for p, q in shares):
            problem = "the dict's entries were split differently"
        else:
            plains, paddeds = [p for p, _ in shares], [q for _, q in shares]
            sizes = [len(p) for p in plains]
            if [v for p in plains for v in p] != list(range(length)):
                problem = f"shares {plains} do not cover range({length}) once, in order"
            elif max(sizes) - min(sizes) > 1:
                problem = f"uneven shares {sizes}"
            elif length >= acc.num_processes:
                if len({len(q) for q in paddeds}) != 1:
                    problem = f"padded shares of unequal length {paddeds}"
                for p, q in zip(plains, paddeds, strict=True):
                    if q[: len(p)] != p or any(v != p[-1] for v in q[len(p) :]):
                        problem = f"padded share {q} is not {p} padded with its last element"
        _agree(problem)

    prop()


def check_pad(acc: Accelerator) -> None:
    """Every rank ends with the largest size along ``dim``; its data is kept, the rest is
    ``pad_index``, in front with ``pad_first``."""

    @_SETTINGS
    @given(
        sizes=st.lists(st.integers(0, 6), min_size=4, max_size=4),
        ndim=st.integers(1, 3),
        dim=st.integers(0, 2),
        pad_index=st.integers(-3, 3),
        pad_first=st.booleans(),
    )
    def prop(sizes: list[int], ndim: int, dim: int, pad_index: int, pad_first: bool) -> None:
        dim = dim % ndim
        rank, n = acc.process_index, acc.num_processes
        shape = [2] * ndim
        shape[dim] = sizes[rank]
        tensor = torch.arange(1, 1 + int(torch.tensor(shape).prod()), dtype=torch.float32)
        tensor = tensor.reshape(shape) + 100 * rank
        padded = acc.pad_across_processes(tensor, dim=dim, pad_index=pad_index, pad_first=pad_first)
        largest = max(sizes[:n])
        problem = None
        if padded.shape[dim] != largest or padded.dim() != ndim:
            problem = f"rank {rank}: shape {tuple(padded.shape)}, expected size {largest} on {dim}"
        else:
            start = largest - sizes[rank] if pad_first else 0
            kept = padded.narrow(dim, start, sizes[rank])
            rest = torch.cat(
                [
                    padded.narrow(dim, 0, start),
                    padded.narrow(dim, start + sizes[rank], largest - start - sizes[rank]),
                ],
                dim=dim,
            )
            if not torch.equal(kept, tensor):
                problem = f"rank {rank}: data not kept"
            elif rest.numel() and not bool((rest == pad_index).all()):
                problem = f"rank {rank}: padding is not {pad_index}"
        _agree(problem)

    prop()


def check_gather_for_metrics(acc: Accelerator) -> None:
    """Gathering every batch of a prepared loader gives back the data set exactly, in order,
    without the samples repeated to even out the last batch."""

    @_SETTINGS
    @given(length=st.integers(1, 40), batch=st.integers(1, 8), nested=st.booleans())
    def prop(length: int, batch: int, nested: bool) -> None:
        loader = acc.prepare(DataLoader(torch.arange(length), batch_size=batch))
        seen: list[int] = []
        for values in loader:
            item = {"x": values, "y": [values * 2]} if nested else values
            gathered = acc.gather_for_metrics(item)
            flat = gathered["x"] if nested else gathered
            if nested and not torch.equal(gathered["y"][0], flat * 2):
                _agree("nested entries were gathered differently")
                return
            seen += [int(v) for v in flat]
        problem = None if seen == list(range(length)) else f"gathered {seen} for range({length})"
        _agree(problem)

    prop()


def run_all() -> int:
    """Run the three properties on this rank; returns the number of examples each ran."""
    acc = Accelerator(cpu=True)
    check_split(acc)
    check_pad(acc)
    check_gather_for_metrics(acc)
    return EXAMPLES
