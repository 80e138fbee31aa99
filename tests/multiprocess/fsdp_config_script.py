"""A training script that records what ``Accelerator()`` built from the launch's FSDP settings.

Run by ``nbaccel launch``, ``torchrun`` and ``notebook_launcher`` (as ``record``): every rank
writes ``rank{N}.json`` into the output folder: the distributed type, the wrapped model's
class, the sharding, the wrapped layers, the offload / prefetch / parameter settings as the
FSDP module holds them, and the files ``save_state`` wrote.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn


class BertLayer(nn.Module):
    """A transformer layer stand-in, named as the guide's ``fsdp_transformer_layer_cls_to_wrap``."""

    def __init__(self) -> None:
        super().__init__()
        self.dense = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.dense(x)) + x


class TinyBert(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.layers = nn.Sequential(BertLayer(), BertLayer())
        self.head = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers(self.embed(x)))


def _fsdp1(model: nn.Module) -> dict[str, Any]:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    return {
        "sharding_strategy": model.sharding_strategy.name,
        "wrapped": sorted(
            type(m.module).__name__
            for m in model.modules()
            if isinstance(m, FSDP) and m is not model
        ),
        "offload_params": bool(model.cpu_offload.offload_params),
        "backward_prefetch": getattr(model.backward_prefetch, "name", None),
        "forward_prefetch": bool(model.forward_prefetch),
        "use_orig_params": bool(model._use_orig_params),
    }


def _fsdp2(model: nn.Module) -> dict[str, Any]:
    from torch.distributed.fsdp import FSDPModule

    group = model._get_fsdp_state()._fsdp_param_group  # type: ignore[operator]
    return {
        "reshard_after_forward": group.post_forward_mesh_info is not None,
        "wrapped": sorted(
            type(m).__name__
            for m in model.modules()
            if isinstance(m, FSDPModule) and m is not model
        ),
    }


def _full_sum(model: nn.Module) -> float:
    """The sum of the whole model's weights, gathered from the shards (every rank calls it)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    if isinstance(model, FSDP):
        with FSDP.summon_full_params(model):
            return float(sum(p.detach().sum() for p in model.parameters()))
    total = 0.0
    for param in model.parameters():
        full = param.full_tensor() if hasattr(param, "full_tensor") else param
        total += float(full.detach().sum())
    return total


def record(out: str) -> dict[str, Any]:
    """Prepare, train one step, save_state; write and return what this rank saw."""
    from nbaccel import Accelerator

    accelerator = Accelerator()
    torch.manual_seed(accelerator.process_index)  # each rank starts from other weights
    model = TinyBert()
    init = float(sum(p.detach().sum() for p in model.parameters()))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    start = _full_sum(model)
    loss = model(torch.randn(4, 8)).float().pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    plugin = accelerator.state.fsdp_plugin
    seen: dict[str, Any] = {
        "distributed_type": str(accelerator.distributed_type),
        "model_class": type(model).__name__,
        "mixed_precision": accelerator.mixed_precision,
        "activation_checkpointing": bool(plugin.activation_checkpointing) if plugin else None,
        "checkpointed": sum("checkpoint" in type(m).__name__.lower() for m in model.modules()),
        "init_sum": init,  # this rank's own weights
        "start_sum": start,  # the whole sharded model's weights after prepare
        "sync_module_states": bool(plugin.sync_module_states) if plugin else None,
        "ram_efficient_loading": bool(plugin.cpu_ram_efficient_loading) if plugin else None,
        "ram_variable": os.environ.get("FSDP_CPU_RAM_EFFICIENT_LOADING"),
    }
    if seen["model_class"] == "FullyShardedDataParallel":
        seen.update(_fsdp1(model))
    elif plugin is not None:
        seen.update(_fsdp2(model))
    folder = Path(out) / "state"
    accelerator.save_state(str(folder))
    accelerator.wait_for_everyone()
    seen["state_dict_type"] = plugin.state_dict_type.name if plugin else None
    seen["saved"] = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    rank = accelerator.process_index
    Path(out, f"rank{rank}.json").write_text(json.dumps(seen))
    return seen


if __name__ == "__main__":
    record(sys.argv[1])
