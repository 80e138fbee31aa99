"""hfai's FSDP documentation examples, as written (MyModel, loss_fn, dataloader supplied)."""

from __future__ import annotations

import functools
import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn

from nbaccel.fsdp import BackwardPrefetch, FullyShardedDataParallel, size_based_auto_wrap_policy


class MyModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def loss_fn(y: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(output, y)


def run_examples() -> None:
    rank = dist.get_rank()
    g = torch.Generator().manual_seed(rank)
    dataloader = [(torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g))] * 2
    epochs = 2
    folder = tempfile.mkdtemp() if rank == 0 else None
    box = [folder]
    dist.broadcast_object_list(box)
    os.chdir(box[0])
    world = dist.get_world_size()

    # 训练 (training), with each documented option
    model = MyModel()
    model = FullyShardedDataParallel(
        model,
        auto_wrap_policy=functools.partial(size_based_auto_wrap_policy, min_num_params=100),
        backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
        fsdp_group_size=2 if world == 4 else None,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    for epoch in range(epochs):  # noqa: B007 (as written)
        for step, (x, y) in enumerate(dataloader):  # noqa: B007
            optimizer.zero_grad()
            output = model(x)
            loss_fn(y, output).backward()
            optimizer.step()

    # 保存完整的 checkpoint (full checkpoint)
    with model.summon_full_params():
        if rank == 0:
            state = model.state_dict()
            torch.save(state, "model.pt")
    dist.barrier()
    state = torch.load("model.pt", map_location="cpu")
    with model.summon_full_params():
        model.load_state_dict(state)
    model2 = MyModel()
    model2.load_state_dict(state)  # 非 FSDP 模型也可以直接加载
    x = torch.randn(3, 8)
    assert torch.allclose(model(x), model2(x), atol=1e-6)
    assert not torch.equal(state["a.weight"], MyModel().a.weight.detach())  # trained

    # 每个 GPU 都保存自己本地的 checkpoint (each process its own shards)
    state = model.state_dict()
    torch.save(state, f"model{rank}.pt")
    before = model(x).detach()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    state = torch.load(f"model{rank}.pt", map_location="cpu", weights_only=False)
    model.load_state_dict(state)
    assert torch.allclose(model(x), before, atol=1e-6)
    dist.barrier()
