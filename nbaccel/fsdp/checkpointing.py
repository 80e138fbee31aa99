"""Activation checkpointing of the layers that the wrap policy picks (applied before sharding)."""

from __future__ import annotations

import functools
from typing import Any

from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    apply_activation_checkpointing,
    checkpoint_wrapper,
    offload_wrapper,
)

from .policies import module_predicate

__all__ = ["apply_checkpointing", "wrap_targets"]


def wrap_targets(model: nn.Module, policy: Any, skip: list[nn.Module]) -> list[nn.Module]:
    """Submodules (not the root, not ``skip`` or inside it) that ``policy`` picks, leaves first."""
    predicate = module_predicate(policy)
    if predicate is None:
        return []
    skipped = {id(m) for s in skip for m in s.modules()}
    found: list[nn.Module] = []
    for module in reversed(list(model.modules())[1:]):
        if id(module) not in skipped and predicate(module):
            found.append(module)
    return found


def _checkpointed(module: nn.Module, offload: bool) -> nn.Module:
    wrapped = checkpoint_wrapper(module, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
    # offload_wrapper saves what the checkpoint keeps for its recompute (the layer's input)
    # in CPU memory during forward and brings it back in backward
    return offload_wrapper(wrapped) if offload else wrapped


def apply_checkpointing(
    model: nn.Module, policy: Any, skip: list[nn.Module], offload: bool = False
) -> int:
    """Recompute activations in backward for the layers ``policy`` picks (without a policy:
    the model's direct children that hold parameters); with ``offload`` the inputs kept for
    the recompute wait in CPU memory. Returns how many were wrapped."""
    targets = wrap_targets(model, policy, skip)
    if not targets:
        skipped = {id(m) for m in skip}
        targets = [
            child
            for child in model.children()
            if id(child) not in skipped and any(True for _ in child.parameters())
        ]
    chosen = {id(m) for m in targets}
    apply_activation_checkpointing(
        model,
        checkpoint_wrapper_fn=functools.partial(_checkpointed, offload=offload),
        check_fn=lambda module: id(module) in chosen,
    )
    return len(chosen)
