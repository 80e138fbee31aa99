"""RAM-efficient loading: process 1's peak memory must not hold a full copy of a 1 GiB model."""

from __future__ import annotations

import gc
import resource

import torch
from torch import nn

from nbaccel import Accelerator, PartialState
from nbaccel.fsdp import FullyShardedDataParallelPlugin as Plugin
from nbaccel.fsdp import ram_efficient_init

GIB = 1024**3
WIDTH = 4096


class Big(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(17)])


def ram_efficient_loading_others_hold_no_full_copy() -> None:
    if PartialState().num_processes != 2:
        return  # shown once, at 2 processes
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    plugin = Plugin(
        cpu_ram_efficient_loading=True,
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["Linear"],
        fsdp_version=2,
    )
    acc = Accelerator(fsdp_plugin=plugin)
    with ram_efficient_init() as empty, torch.no_grad():
        model = Big()
        if not empty:
            for i, layer in enumerate(model.layers):
                layer.weight.fill_(float(i))
    size = sum(p.numel() * 4 for p in model.parameters())
    assert size >= GIB, size
    # meta tensors cannot be moved: placement is skipped (the shards land on the device)
    model = acc.prepare(model)  # a model still on "meta" is not moved; FSDP fills it
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    local = model.layers[3].weight.to_local()
    assert torch.all(local == 3.0), "process 0's weights did not arrive"
    print(
        f"[ram] rank {acc.process_index}: model {size / GIB:.2f} GiB, "
        f"peak growth {peak / GIB:.2f} GiB, empty start={empty}",
        flush=True,
    )
    if acc.process_index != 0:
        assert empty and peak < 0.75 * size, f"peak growth {peak / GIB:.2f} GiB: a full copy"
    del model

    gc.collect()
