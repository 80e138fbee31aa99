"""Checks nbaccel's collectives on every process: gather, gather_object, broadcast, padding,
reduce, device copies and the error for shapes that differ between processes.

Run ``debug_launcher(test_ops.main)`` or ``nbaccel launch --num_processes 2 test_ops.py``;
one process works too. A failed check raises ``AssertionError`` naming the check and the values.
"""

from __future__ import annotations

import torch

from nbaccel.state import PartialState
from nbaccel.test_utils.scripts.entry import report_passed, xla_entry
from nbaccel.utils import (
    broadcast,
    copy_tensor_to_devices,
    gather,
    gather_object,
    pad_across_processes,
    reduce,
)

__all__ = ["main"]


def _rank_rows(state: PartialState) -> torch.Tensor:
    """Process r holds ``[3r+1, 3r+2, 3r+3]``."""
    start = state.process_index * 3 + 1
    return torch.arange(start, start + 3, dtype=torch.float32, device=state.device)


def _expect(name: str, got: object, expected: object) -> None:
    if isinstance(got, torch.Tensor) and isinstance(expected, torch.Tensor):
        ok = got.shape == expected.shape and bool(torch.equal(got.cpu(), expected.cpu()))
    else:
        ok = got == expected
    if not ok:
        raise AssertionError(f"{name}: expected {expected}, got {got}")


def check_gather(state: PartialState) -> None:
    world = state.num_processes
    everyone = torch.arange(1, 3 * world + 1, dtype=torch.float32)
    _expect("gather", gather(_rank_rows(state)), everyone)
    nested = gather({"x": _rank_rows(state), "n": [torch.tensor(state.process_index)]})
    _expect("gather (nested)", nested["x"], everyone)
    _expect("gather (0-d leaves)", nested["n"][0].reshape(-1), torch.arange(world))


def check_gather_object(state: PartialState) -> None:
    mine = {"rank": state.process_index, "text": "x" * state.process_index}
    expected = [{"rank": r, "text": "x" * r} for r in range(state.num_processes)]
    _expect("gather_object", gather_object([mine]), expected)


def check_gather_non_contiguous(state: PartialState) -> None:
    block = torch.arange(6, dtype=torch.float32, device=state.device).reshape(2, 3)
    transposed = block.t()  # (3, 2), not contiguous
    expected = torch.cat([transposed.contiguous()] * state.num_processes)
    _expect("gather (non-contiguous)", gather(transposed), expected)


def check_broadcast(state: PartialState) -> None:
    value = _rank_rows(state)
    _expect("broadcast", broadcast(value, from_process=0), torch.tensor([1.0, 2.0, 3.0]))
    last = state.num_processes - 1
    from_last = broadcast(_rank_rows(state), from_process=last)
    _expect("broadcast (last process)", from_last, torch.arange(3.0) + 3 * last + 1)


def check_pad_across_processes(state: PartialState) -> None:
    world, rank = state.num_processes, state.process_index
    ragged = torch.ones(rank + 1, device=state.device)
    padded = pad_across_processes(ragged, pad_index=0)
    _expect(
        "pad_across_processes",
        padded,
        torch.tensor([1.0] * (rank + 1) + [0.0] * (world - rank - 1)),
    )
    first = pad_across_processes(ragged, pad_index=-1, pad_first=True)
    _expect(
        "pad_across_processes (first)",
        first,
        torch.tensor([-1.0] * (world - rank - 1) + [1.0] * (rank + 1)),
    )


def check_reduce(state: PartialState) -> None:
    world = state.num_processes
    rows = torch.stack(
        [torch.arange(3 * r + 1, 3 * r + 4, dtype=torch.float32) for r in range(world)]
    )
    _expect("reduce (sum)", reduce(_rank_rows(state), "sum"), rows.sum(0))
    _expect("reduce (mean)", reduce(_rank_rows(state), "mean"), rows.sum(0) / world)
    _expect("reduce (max)", reduce(_rank_rows(state), "max"), rows.max(0).values)
    _expect("reduce (min)", reduce(_rank_rows(state), "min"), rows.min(0).values)


def check_mismatched_shapes(state: PartialState) -> None:
    """A gather whose shapes differ between processes is refused on every process, by name."""
    if state.num_processes == 1:
        return
    try:
        gather(torch.zeros(state.process_index + 1, device=state.device))
    except ValueError as error:
        if "shape" not in str(error):
            raise AssertionError(f"the mismatch error does not name the shapes: {error}") from error
        return
    raise AssertionError("gather of different shapes on different processes did not raise")


def check_copy_tensor_to_devices(state: PartialState) -> None:
    value = torch.tensor([4.0, 5.0], device=state.device) if state.is_main_process else None
    copied = copy_tensor_to_devices(value)
    _expect("copy_tensor_to_devices", copied, torch.tensor([4.0, 5.0]))


CHECKS = (
    check_gather,
    check_gather_object,
    check_gather_non_contiguous,
    check_broadcast,
    check_pad_across_processes,
    check_reduce,
    check_mismatched_shapes,
    check_copy_tensor_to_devices,
)


def main() -> None:
    """Run every check on this process (every process must run it)."""
    state = PartialState()
    for check in CHECKS:
        state.print(f"** {check.__name__[len('check_') :]} on {state.num_processes} process(es)")
        check(state)
    report_passed(state, "test_ops")


_mp_fn = xla_entry(main)


if __name__ == "__main__":
    main()
