"""A training step with FSDP asked for, as a plain script writes it, recording what it got.

``python fsdp_alone_script.py plugin|file [fsdp_version]`` trains with ``fsdp_plugin=`` or with
``Accelerator()`` alone (the config file in force asks for FSDP) and prints one JSON line: the
distributed type, the plugin in use, the prepared model's class, the process group, the
warnings, the loss before and after. ``record`` is the same step as a launched function.
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


def record(asked: str = "plugin", fsdp_version: int = 1) -> dict[str, Any]:
    """One training step on this process; what it ran with."""
    from nbaccel import Accelerator, FullyShardedDataParallelPlugin

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if asked == "plugin":
            plugin = FullyShardedDataParallelPlugin(fsdp_version=fsdp_version)
            accelerator = Accelerator(cpu=True, fsdp_plugin=plugin)
        else:
            accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)
    x = torch.linspace(-1, 1, 32).reshape(8, 4)
    y = x.sum(dim=1, keepdim=True)
    losses = []
    for _ in range(3):
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    plugin_in_use = accelerator.state.fsdp_plugin
    return {
        "distributed_type": str(accelerator.distributed_type),
        "num_processes": accelerator.num_processes,
        "plugin": None if plugin_in_use is None else plugin_in_use.fsdp_version,
        "model_class": type(model).__name__,
        "group_size": dist.get_world_size() if dist.is_initialized() else None,
        "mixed_precision": accelerator.mixed_precision,
        "warnings": [str(w.message) for w in caught if "FSDP" in str(w.message)],
        "losses": losses,
    }


if __name__ == "__main__":
    version = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    print(json.dumps(record(sys.argv[1], version)))
