"""Checks when nbaccel synchronises gradients: ``no_sync``, ``accumulate`` and data loader ends.

Every process trains a :class:`~nbaccel.test_utils.training.RegressionModel` through the
Accelerator and compares it, step by step, with the same model trained by hand on one process
with the whole global batch. Run ``debug_launcher(test_sync.main)`` (or with
``num_processes=1``) or ``nbaccel launch --num_processes 2 test_sync.py``. A failed check
raises ``AssertionError`` naming the check, the step and the values.
"""

from __future__ import annotations

import copy

import torch
from torch.utils.data import DataLoader

from nbaccel.accelerator import Accelerator
from nbaccel.test_utils.scripts.entry import report_passed, xla_entry
from nbaccel.test_utils.training import RegressionDataset, RegressionModel
from nbaccel.testing import reset_state
from nbaccel.utils import gather

__all__ = ["main"]

BATCH = 4  # samples per process per step


def _grads(model: torch.nn.Module) -> torch.Tensor:
    return torch.stack([p.grad.detach().cpu().clone() for p in model.parameters()])  # type: ignore[union-attr]


def _loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(batch["x"]), batch["y"])


def _close(name: str, got: torch.Tensor, expected: torch.Tensor) -> None:
    if not torch.allclose(got.cpu(), expected.cpu(), atol=1e-5):
        raise AssertionError(f"{name}: expected {expected.tolist()}, got {got.tolist()}")


def _setup(
    accelerator: Accelerator, samples: int
) -> tuple[torch.nn.Module, torch.nn.Module, DataLoader, RegressionDataset]:
    """The reference model (one process, whole batches), the prepared model, and the
    prepared loader over a fixed data set whose global batches follow each other in order."""
    dataset = RegressionDataset(length=samples, seed=42)
    reference = RegressionModel(a=1, b=1)
    model = accelerator.prepare(copy.deepcopy(reference))
    loader = accelerator.prepare(DataLoader(dataset, batch_size=BATCH))
    return reference, model, loader, dataset


def check_no_sync(accelerator: Accelerator) -> None:
    """Inside ``no_sync`` each process keeps its own gradients; outside they are averaged."""
    world = accelerator.num_processes
    reference, model, loader, dataset = _setup(accelerator, BATCH * world * 2)
    for step, batch in enumerate(loader):
        local = copy.deepcopy(reference)
        _loss(local, batch).backward()
        everyone = gather(_grads(local)[None].to(accelerator.device)).cpu()
        if step % 2 == 0:
            with accelerator.no_sync(model):
                accelerator.backward(_loss(model, batch))
            _close(
                f"no_sync, step {step}: this process's own gradients", _grads(model), _grads(local)
            )
        else:
            accelerator.backward(_loss(model, batch))
            _close(f"synced, step {step}: the mean over processes", _grads(model), everyone.mean(0))
        model.zero_grad()
    del dataset


def check_gradient_accumulation(accelerator: Accelerator, steps: int) -> None:
    """With ``accumulate``, gradients synchronise and the optimizer steps every ``steps``
    batches and on the last batch; the weights follow one process's training on the global
    batches, each loss divided by ``steps``."""
    world = accelerator.num_processes
    total = BATCH * world * (2 * steps + 1)  # the last window is short: the loader's end syncs
    reference, model, loader, dataset = _setup(accelerator, total)
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    batches = len(loader)
    for step, batch in enumerate(loader):
        with accelerator.accumulate(model):
            accelerator.backward(_loss(model, batch))
            optimizer.step()
            optimizer.zero_grad()
        expect_sync = (step + 1) % steps == 0 or step == batches - 1
        if accelerator.sync_gradients != expect_sync:
            raise AssertionError(
                f"accumulate({steps}), step {step} of {batches}: sync_gradients is "
                f"{accelerator.sync_gradients}, expected {expect_sync}"
            )
        rows = slice(step * BATCH * world, (step + 1) * BATCH * world)
        (_loss(reference, {"x": dataset.x[rows], "y": dataset.y[rows]}) / steps).backward()
        if expect_sync:
            ref_optimizer.step()
            ref_optimizer.zero_grad()
        weights = accelerator.unwrap_model(model)
        _close(
            f"accumulate({steps}), step {step}: weights",
            _grads_free(weights),
            _grads_free(reference),
        )


def _grads_free(model: torch.nn.Module) -> torch.Tensor:
    return torch.stack([p.detach().cpu().clone() for p in model.parameters()])


def check_dataloader_break(accelerator: Accelerator) -> None:
    """Leaving a loader early hands the gradient state back to the loader around it, which
    still reports its own last batch."""
    outer = accelerator.prepare(_loader(length=BATCH * 4, seed=1))
    inner = accelerator.prepare(_loader(length=BATCH * 8, seed=2))
    state = accelerator.gradient_state
    ends = []
    for outer_step, _ in enumerate(outer):
        if outer_step == 0:
            for inner_step, _ in enumerate(inner):
                if state.active_dataloader is not inner:
                    raise AssertionError(f"inner step {inner_step}: the inner loader is not active")
                if inner_step == 1:
                    break
        if state.active_dataloader is not outer:
            raise AssertionError(f"outer step {outer_step}: the outer loader is not active")
        ends.append(state.end_of_dataloader)
    if ends != [False] * (len(ends) - 1) + [True]:
        raise AssertionError(f"end_of_dataloader over the outer loop: {ends}, expected True last")
    if state.in_dataloader:
        raise AssertionError("after both loops the gradient state still reports a loader")


def _loader(length: int, seed: int) -> DataLoader:
    return DataLoader(RegressionDataset(length=length, seed=seed), batch_size=BATCH)


def main() -> None:
    """Run every check on this process (every process must run it)."""
    accelerator = Accelerator()
    accelerator.print(f"** no_sync on {accelerator.num_processes} process(es)")
    check_no_sync(accelerator)
    for steps in (2, 3):
        reset_state()  # a new gradient accumulation setting: start from a fresh state
        accelerator = Accelerator(gradient_accumulation_steps=steps)
        accelerator.print(f"** gradient accumulation, {steps} steps")
        check_gradient_accumulation(accelerator, steps)
    accelerator.print("** leaving a data loader early")
    check_dataloader_break(accelerator)
    report_passed(accelerator, "test_sync")


_mp_fn = xla_entry(main)


if __name__ == "__main__":
    main()
