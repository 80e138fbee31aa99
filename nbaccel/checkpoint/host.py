"""Copies of XLA tensors on the CPU, for writing: torch_xla's tensors have no host storage.

As Accelerate does on TPU, checkpoints and exported weights hold CPU tensors whatever the
device the model trained on, so they load anywhere (and on the XLA device again through
``load_state``). Without ``torch_xla`` imported there are no XLA tensors and nothing is copied.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

__all__ = ["to_host"]


def to_host(obj: Any) -> Any:
    """``obj`` with every XLA tensor in its dicts, lists and tuples copied to the CPU; one
    tensor object met twice gives one copy. Everything else is returned as it is."""
    if "torch_xla" not in sys.modules:
        return obj
    copies: dict[int, torch.Tensor] = {}

    def walk(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if value.device.type != "xla":
                return value
            if id(value) not in copies:
                copies[id(value)] = value.detach().cpu()
            return copies[id(value)]
        if isinstance(value, dict):
            return type(value)((key, walk(item)) for key, item in value.items())
        if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
            return type(value)(walk(item) for item in value)
        return value

    return walk(obj)
