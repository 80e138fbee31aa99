"""A launched function that trains a step and records the precision its rank ran in."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn


def record(mixed_precision: str | None = None) -> dict[str, Any]:
    """One training step on this rank (``Accelerator(mixed_precision=...)``; None: the
    launcher's choice): the precision reported and the one the step ran in."""
    from nbaccel import Accelerator, AcceleratorState

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        accelerator = Accelerator(mixed_precision=mixed_precision)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    computed: list[torch.dtype] = []
    model[0].register_forward_hook(lambda mod, inp, out: computed.append(out.dtype))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    x = torch.linspace(-1, 1, 16).reshape(4, 4)
    with accelerator.autocast():
        autocast_on = torch.is_autocast_enabled("cpu")
        out = model(x)
    accelerator.backward(out.pow(2).mean())
    optimizer.step()
    return {
        "rank": accelerator.process_index,
        "reported": accelerator.mixed_precision,
        "state_reported": AcceleratorState().mixed_precision,
        "autocast_on": autocast_on,
        "computed": [str(d) for d in computed],
        "output": str(out.dtype),
        "parameters": sorted({str(p.dtype) for p in model.parameters()}),
        "scaler": accelerator.scaler is not None,
        "skipped": accelerator.optimizer_step_was_skipped,
        "warnings": [str(w.message) for w in caught if "full precision" in str(w.message)],
    }


def record_fsdp(fsdp_version: int) -> dict[str, Any]:
    """One FSDP step on this rank under the launcher's precision: the dtypes it ran in."""
    from nbaccel import Accelerator, FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin(fsdp_version=fsdp_version)
    accelerator = Accelerator(fsdp_plugin=plugin)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    computed: list[torch.dtype] = []
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    first.register_forward_hook(lambda mod, inp, out: computed.append(out.dtype))
    out = model(torch.linspace(-1, 1, 16).reshape(4, 4))
    accelerator.backward(out.pow(2).mean())
    optimizer.step()
    policy = plugin.mixed_precision_policy
    return {
        "distributed_type": str(accelerator.distributed_type),
        "reported": accelerator.mixed_precision,
        "policy_param_dtype": str(getattr(policy, "param_dtype", None)),
        "computed": [str(d) for d in computed],
        "output": str(out.dtype),
    }
