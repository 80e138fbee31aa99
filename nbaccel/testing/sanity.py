"""The script ``nbaccel test`` launches: processes, collectives and a few training steps.

Every rank checks that the process group has the expected size, that all_gather, reduce
and broadcast give the right values, and that a few DDP training steps give the same weights
as one process trained on the whole batch (computed on each rank). It prints one line per
check and exits 1 when one fails. ``NBACCEL_TEST_FAIL_RANK=N`` makes rank N fail on purpose,
to try the failure path.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch import nn

from nbaccel.accelerator import Accelerator
from nbaccel.environment import precision_in_effect, sanity_fail_rank
from nbaccel.testing.training import make_dataset, make_model

STEPS = 4
BATCH = 8  # per process


def _reference(world: int, precision: str) -> dict[str, torch.Tensor]:
    """The weights after STEPS steps of one process on the global batches."""
    model = make_model(seed=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs, labels = make_dataset(samples=STEPS * BATCH * world, seed=1)
    for step in range(STEPS):
        rows = slice(step * BATCH * world, (step + 1) * BATCH * world)
        with _autocast(precision):
            loss = nn.functional.cross_entropy(model(inputs[rows]), labels[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _autocast(precision: str) -> torch.autocast:
    """The autocast the ranks train under on the CPU (fp16 trains in fp32 there)."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(
        precision_in_effect(precision, "cpu")
    )
    return torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None)


def _train(accelerator: Accelerator) -> dict[str, torch.Tensor]:
    world, rank = accelerator.num_processes, accelerator.process_index
    model = make_model(seed=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    inputs, labels = make_dataset(samples=STEPS * BATCH * world, seed=1)
    for step in range(STEPS):
        start = (step * world + rank) * BATCH
        x = inputs[start : start + BATCH].to(accelerator.device)
        y = labels[start : start + BATCH].to(accelerator.device)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
    weights = accelerator.unwrap_model(model).state_dict()
    return {k: v.detach().cpu().clone() for k, v in weights.items()}


def main() -> int:
    """Run the checks on this rank; return 0 when all pass."""
    accelerator = Accelerator()
    rank, world = accelerator.process_index, accelerator.num_processes
    results: list[tuple[str, bool, str]] = []
    if sanity_fail_rank() == rank:
        print(f"[rank {rank}] failing on purpose (NBACCEL_TEST_FAIL_RANK={rank})", flush=True)
        return 1
    expected_world = dist.get_world_size() if dist.is_initialized() else 1
    results.append(("processes up", world == expected_world, f"{world} process(es)"))
    device = accelerator.device
    gathered = accelerator.gather(torch.tensor([rank], device=device)).cpu().tolist()
    results.append(("all_gather", gathered == list(range(world)), str(gathered)))
    total = accelerator.reduce(torch.tensor([rank + 1.0], device=device), reduction="sum")
    results.append(("reduce", float(total) == world * (world + 1) / 2, f"{float(total):g}"))
    value = torch.tensor([float(rank) + 7.0], device=device)
    if dist.is_initialized():
        dist.broadcast(value, src=0)
    results.append(("broadcast", float(value) == 7.0, f"{float(value):g}"))
    trained = _train(accelerator)
    reference = _reference(world, accelerator.mixed_precision)
    diff = max(float((trained[k] - reference[k]).abs().max()) for k in reference)
    tolerance = 1e-5 if accelerator.mixed_precision == "no" else 5e-2
    results.append(("training = one-process reference", diff <= tolerance, f"max diff {diff:.2e}"))
    lines = [f"[rank {rank}] {'PASS' if ok else 'FAIL'} {n}: {d}\n" for n, ok, d in results]
    sys.stdout.write("".join(lines))  # one write, so ranks do not interleave within a line
    sys.stdout.flush()
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        print(
            f"sanity: {world} process(es), {accelerator.distributed_type}, "
            f"device {device}, mixed_precision={accelerator.mixed_precision}",
            flush=True,
        )
    return 0 if all(ok for _, ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
