"""The whole-library check on every process: processes, collectives, training, process control,
splitting inputs, random states, data loaders and triggers.

It starts with the checks ``nbaccel test`` runs (:mod:`nbaccel.testing.sanity`: the process
group, all_gather, reduce, broadcast, and DDP training equal to one process's) and adds the
rest of the Accelerator's multi-process behaviour. Run ``debug_launcher(test_script.main)`` or
``nbaccel launch --num_processes 2 test_script.py``; one process works too. A failed check
raises ``AssertionError`` naming the check and the values.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

import nbaccel.testing.sanity as sanity
from nbaccel.accelerator import Accelerator
from nbaccel.state import PartialState
from nbaccel.test_utils.cases import are_the_same_tensors
from nbaccel.test_utils.scripts.entry import report_passed, xla_entry
from nbaccel.utils import broadcast_object_list, gather, gather_object, synchronize_rng_states

__all__ = ["main"]


def _same(name: str, got: Any, expected: Any) -> None:
    if got != expected:
        raise AssertionError(f"{name}: expected {expected!r}, got {got!r}")


def check_sanity() -> None:
    """The checks of ``nbaccel test``."""
    if sanity.main() != 0:
        raise AssertionError("a check of nbaccel.testing.sanity failed (see its FAIL lines)")


def check_process_control(state: PartialState) -> None:
    """``on_main_process`` & co. run the function on their process only."""
    last = state.num_processes - 1
    ran = {
        "main": state.on_main_process(lambda: True)(),
        "local_main": state.on_local_main_process(lambda: True)(),
        "last": state.on_last_process(lambda: True)(),
        "process 0": state.on_process(lambda: True, process_index=0)(),
    }
    everyone = gather_object([{k: bool(v) for k, v in ran.items()}])
    for name, where in (("main", 0), ("local_main", 0), ("last", last), ("process 0", 0)):
        _same(f"on_{name} ran on", [r for r, row in enumerate(everyone) if row[name]], [where])


def check_main_process_first(state: PartialState) -> None:
    """Inside ``local_main_process_first`` each machine's first process finishes its block
    before the others on that machine start theirs: they find the file it wrote."""
    token = [uuid.uuid4().hex if state.is_main_process else None]
    broadcast_object_list(token)
    folder = Path(tempfile.gettempdir()) / f"nbaccel-test-script-{token[0]}"
    folder.mkdir(exist_ok=True)
    mark = folder / "first.txt"
    with state.local_main_process_first():
        if state.is_local_main_process:
            mark.write_text("done")
        elif not mark.exists():
            raise AssertionError("local_main_process_first: a process ran before the first one")
    state.wait_for_everyone()
    if state.is_local_main_process:
        shutil.rmtree(folder, ignore_errors=True)


def check_split_between_processes(state: PartialState) -> None:
    """Each process gets its contiguous share; together the shares are the whole input."""
    world, rank = state.num_processes, state.process_index
    items = list(range(2 * world + 1))
    with state.split_between_processes(items) as mine:
        shares = gather_object([list(mine)])
    _same("split_between_processes (list), joined", [x for share in shares for x in share], items)
    with state.split_between_processes(items, apply_padding=True) as padded:
        sizes = gather_object([len(padded)])
    _same("split_between_processes (padded) sizes", len(set(sizes)), 1)
    data: dict[str, Any] = {"a": list(range(world * 2)), "b": torch.arange(world * 2)}
    with state.split_between_processes(data) as part:
        _same("split_between_processes (dict), list", list(part["a"]), [2 * rank, 2 * rank + 1])
        _same(
            "split_between_processes (dict), tensor", part["b"].tolist(), [2 * rank, 2 * rank + 1]
        )
    with state.split_between_processes(torch.arange(world * 3).reshape(world * 3, 1)) as rows:
        _same(
            "split_between_processes (tensor)",
            rows[:, 0].tolist(),
            [3 * rank, 3 * rank + 1, 3 * rank + 2],
        )


def check_rng_sync(state: PartialState) -> None:
    """After ``synchronize_rng_states`` every process draws the same numbers."""
    torch.manual_seed(1000 + state.process_index)
    synchronize_rng_states(["torch"])
    draw = torch.rand(4)
    if not are_the_same_tensors(draw):
        raise AssertionError(f"after synchronize_rng_states the draws differ, here {draw.tolist()}")


def check_dataloader(accelerator: Accelerator) -> None:
    """A prepared loader gives every sample once over all processes, in the order of the
    loader it was made from (batch i of process r is batch i * world + r)."""
    world = accelerator.num_processes
    samples: Any = list(range(4 * world * 3))
    loader = accelerator.prepare(DataLoader(samples, batch_size=4))
    seen = torch.cat([gather(batch.to(accelerator.device)).cpu() for batch in loader])
    _same("prepared DataLoader, all processes' batches", seen.tolist(), samples)
    odd: Any = list(range(4 * world + 1))
    uneven = accelerator.prepare(DataLoader(odd, batch_size=4))
    gathered = [accelerator.gather_for_metrics(b.to(accelerator.device)).cpu() for b in uneven]
    _same("gather_for_metrics drops the padding", torch.cat(gathered).tolist(), odd)


def check_trigger(accelerator: Accelerator) -> None:
    """A trigger set on the last process is seen by every process, once."""
    _same("check_trigger before set_trigger", accelerator.check_trigger(), False)
    if accelerator.is_last_process:
        accelerator.set_trigger()
    _same("check_trigger after set_trigger on the last process", accelerator.check_trigger(), True)
    _same("check_trigger after it was seen", accelerator.check_trigger(), False)


def check_reinstantiated_state(state: PartialState) -> None:
    """A second ``PartialState()`` reads the same process-wide state."""
    again = PartialState()
    _same("a new PartialState's process_index", again.process_index, state.process_index)
    _same("a new PartialState's num_processes", again.num_processes, state.num_processes)
    _same("a new PartialState's device", again.device, state.device)


def main() -> None:
    """Run every check on this process (every process must run it)."""
    check_sanity()
    accelerator = Accelerator()
    state = PartialState()
    checks: list[tuple[str, Callable[[], None]]] = [
        ("process control", lambda: check_process_control(state)),
        ("local_main_process_first", lambda: check_main_process_first(state)),
        ("split_between_processes", lambda: check_split_between_processes(state)),
        ("random states", lambda: check_rng_sync(state)),
        ("data loaders", lambda: check_dataloader(accelerator)),
        ("trigger", lambda: check_trigger(accelerator)),
        ("a reinstantiated state", lambda: check_reinstantiated_state(state)),
    ]
    for name, check in checks:
        state.print(f"** {name} on {state.num_processes} process(es)")
        check()
    report_passed(state, "test_script")


_mp_fn = xla_entry(main)


if __name__ == "__main__":
    main()
