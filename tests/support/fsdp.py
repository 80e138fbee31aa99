"""What the FSDP rank-side checks of the multiprocess and multinode tiers share: the small
model (its blocks wrapped by class name), its full state dict, and an exception check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.Sequential(Block(), Block(), Block())
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x))


def full_state(model: nn.Module) -> dict[str, torch.Tensor]:
    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    return {k.replace("_checkpoint_wrapped_module.", ""): v.float() for k, v in sd.items()}


def raises(kind: type[BaseException], fn: Callable[[], Any], *words: str) -> None:
    try:
        fn()
    except kind as exc:
        for word in words:
            assert word in str(exc), f"{word!r} not in {exc}"
        return
    raise AssertionError(f"no {kind.__name__} raised")
