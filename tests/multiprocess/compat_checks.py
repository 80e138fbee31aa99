"""Rank-side checks of the Accelerate names that work across processes: triggers, RNG
synchronisation, joining uneven inputs, forced gradient sync, the parallelism mesh, file saving
and profiling. ``run_compat_checks`` returns ``{name: "ok" or traceback}`` per rank."""

from __future__ import annotations

import os
import tempfile
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from accelerator_checks import all_ranks
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from nbaccel import (
    Accelerator,
    FullyShardedDataParallelPlugin,
    ParallelismConfig,
    ProfileKwargs,
    synchronize_rng_states,
)
from nbaccel.testing import reset_state
from nbaccel.utils import copy_tensor_to_devices, save, synchronize_rng_state

COMPAT_CHECKS: list[Callable[[], None]] = []


def check(function: Callable[[], None]) -> Callable[[], None]:
    COMPAT_CHECKS.append(function)
    return function


def shared_directory() -> str:
    """A fresh directory made by rank 0, known to every rank."""
    holder = [tempfile.mkdtemp(prefix="nbaccel-compat-") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(holder)
    return str(holder[0])


def run_compat_checks() -> dict[str, str]:
    results: dict[str, str] = {}
    for function in COMPAT_CHECKS:
        reset_state()
        try:
            function()
            results[function.__name__] = "ok"
        except BaseException:
            results[function.__name__] = traceback.format_exc()
        dist.barrier()
    reset_state()
    return results


@check
def a_trigger_set_on_one_rank_is_seen_on_every_rank() -> None:
    accelerator = Accelerator()
    assert accelerator.check_trigger() is False
    if accelerator.process_index == 1:
        accelerator.set_trigger()
    assert accelerator.check_trigger() is True  # on every rank
    assert accelerator.check_trigger() is False  # lowered again


@check
def synchronize_rng_states_copies_rank_0s_generators() -> None:
    Accelerator()
    rank = dist.get_rank()
    torch.manual_seed(100 + rank)
    generator = torch.Generator().manual_seed(200 + rank)
    expected_generator = all_ranks(generator.get_state())[0]
    synchronize_rng_states(["torch", "generator"], generator=generator)
    draws = all_ranks(torch.rand(3))
    assert all(torch.equal(d, draws[0]) for d in draws), draws
    assert torch.equal(generator.get_state(), expected_generator)
    torch.manual_seed(300 + rank)
    synchronize_rng_state("torch")
    draws = all_ranks(torch.rand(2))
    assert torch.equal(draws[0], draws[1])


def uneven_setup() -> tuple[Accelerator, nn.Module, Any, DataLoader]:
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(5, 2), torch.randn(5, 1)), batch_size=1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    return accelerator, model, optimizer, loader


@check
def join_uneven_inputs_lets_ranks_train_on_uneven_batch_counts() -> None:
    accelerator, model, optimizer, loader = uneven_setup()
    steps = 0
    with accelerator.join_uneven_inputs([model], even_batches=False):
        for x, y in loader:  # 5 samples: rank 0 sees 3 batches, rank 1 sees 2
            loss = nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            steps += 1
    assert all_ranks(steps) == [3, 2]
    assert len(loader) == 3  # even_batches is back to the Accelerator's (True)
    weights = all_ranks(accelerator.unwrap_model(model).weight.detach().clone())
    assert torch.equal(weights[0], weights[1])


@check
def trigger_sync_in_backward_synchronises_inside_no_sync() -> None:
    accelerator, model, _, _ = uneven_setup()
    rank = dist.get_rank()
    x, y = torch.full((1, 2), float(rank + 1)), torch.zeros(1, 1)
    with accelerator.no_sync(model):
        nn.functional.mse_loss(model(x), y).backward()
    local = all_ranks(model.module.weight.grad.clone())
    assert not torch.equal(local[0], local[1])
    model.zero_grad()
    with accelerator.no_sync(model), accelerator.trigger_sync_in_backward(model):
        nn.functional.mse_loss(model(x), y).backward()
    synced = all_ranks(model.module.weight.grad.clone())
    torch.testing.assert_close(synced[0], synced[1])
    torch.testing.assert_close(synced[0], (local[0] + local[1]) / 2)


@check
def parallelism_config_builds_the_data_parallel_mesh() -> None:
    accelerator = Accelerator(parallelism_config=ParallelismConfig())
    config = accelerator.parallelism_config
    assert config is not None and config.dp_replicate_size == 2 and config.total_size == 2
    mesh = accelerator.torch_device_mesh
    assert mesh.mesh_dim_names == ("dp_replicate",)
    assert accelerator.data_parallel_rank == dist.get_rank()
    assert accelerator.data_parallel_shard_rank == 0 and accelerator.tensor_parallel_rank == 0
    assert accelerator.state.device_mesh is mesh


@check
def parallelism_config_dp_shard_needs_fsdp_and_then_builds_its_mesh() -> None:
    try:
        Accelerator(parallelism_config=ParallelismConfig(dp_shard_size=2))
    except ValueError as error:
        assert "fsdp_plugin" in str(error)
    else:
        raise AssertionError("dp_shard_size=2 without an FSDP plugin was accepted")
    reset_state()
    accelerator = Accelerator(
        fsdp_plugin=FullyShardedDataParallelPlugin(),
        parallelism_config=ParallelismConfig(dp_shard_size=2),
    )
    assert accelerator.torch_device_mesh.mesh_dim_names == ("dp_shard",)
    assert accelerator.data_parallel_shard_rank == dist.get_rank()


@check
def copy_tensor_to_devices_sends_rank_0s_tensor() -> None:
    Accelerator()
    mine = torch.arange(6.0).reshape(2, 3) if dist.get_rank() == 0 else None
    got = copy_tensor_to_devices(mine)
    assert torch.equal(got, torch.arange(6.0).reshape(2, 3))


@check
def save_writes_once_and_profile_writes_one_trace_per_rank() -> None:
    accelerator = Accelerator()
    directory = shared_directory()
    path = os.path.join(directory, f"rank{dist.get_rank()}.pt")
    save({"rank": dist.get_rank()}, path)
    accelerator.wait_for_everyone()
    assert sorted(os.listdir(directory)) == ["rank0.pt"]
    accelerator.wait_for_everyone()  # every rank has looked before any writes more
    traces = os.path.join(directory, "traces")
    with accelerator.profile(ProfileKwargs(activities=["cpu"], output_trace_dir=traces)):
        torch.ones(8) @ torch.ones(8)
    assert sorted(os.listdir(traces)) == ["profile_0.json", "profile_1.json"]


@check
def ddp_kwargs_comm_hook_is_registered_and_used() -> None:
    from nbaccel import DistributedDataParallelKwargs

    handler = DistributedDataParallelKwargs(comm_hook="fp16")  # bf16 needs NCCL
    accelerator = Accelerator(kwargs_handlers=[handler])
    torch.manual_seed(0)
    model = accelerator.prepare(nn.Linear(3, 1, bias=False))
    assert "fp16_compress_hook" in model._get_ddp_logging_data().get("comm_hook", "")
    x = torch.full((1, 3), 1.0 + dist.get_rank() / 3)
    model(x).sum().backward()
    grads = all_ranks(model.module.weight.grad.clone())
    exact = (1.0 + (1.0 + 1 / 3)) / 2  # 7/6, which fp16 cannot hold
    assert torch.equal(grads[0], grads[1])
    got = grads[0][0, 0].item()
    assert got != exact and abs(got - exact) < 2e-3, got  # averaged in fp16 by the hook
