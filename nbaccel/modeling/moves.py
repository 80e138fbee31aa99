"""Moving a model to a device: tied weights stay tied, and optimizers follow the parameters.

Moving a model to an XLA (TPU) device replaces its parameters with new ones instead of
changing them in place, so weights that were shared (an embedding tied to the output layer)
become independent copies. :func:`move_model_to_device` records the ties, moves the model and
ties again whatever the move untied; :class:`ParameterMoves` points optimizers at the new
parameters.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["ParameterMoves", "find_tied_parameters", "move_model_to_device", "retie_parameters"]


def find_tied_parameters(model: nn.Module, **kwargs: Any) -> list[list[str]]:
    """Groups of parameter names that refer to one and the same parameter (sorted).
    Extra keyword arguments are accepted, as Accelerate does, and not used."""
    by_identity: dict[int, list[str]] = {}
    for module_name, module in model.named_modules(remove_duplicate=False):
        for param_name, param in module.named_parameters(recurse=False):
            name = f"{module_name}.{param_name}" if module_name else param_name
            by_identity.setdefault(id(param), [])
            if name not in by_identity[id(param)]:
                by_identity[id(param)].append(name)
    return sorted(sorted(names) for names in by_identity.values() if len(names) > 1)


def _owner(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    path, _, attr = name.rpartition(".")
    return (model.get_submodule(path) if path else model), attr


def retie_parameters(model: nn.Module, tied_params: list[list[str]]) -> None:
    """Make every name in each group of ``tied_params`` refer to the group's first parameter."""
    for group in tied_params:
        first_module, first_attr = _owner(model, group[0])
        shared = getattr(first_module, first_attr)
        for name in group[1:]:
            module, attr = _owner(model, name)
            if getattr(module, attr) is not shared:
                setattr(module, attr, shared)


def move_model_to_device(model: nn.Module, target: torch.device | str | torch.dtype) -> nn.Module:
    """``model.to(target)`` (a device or a dtype), keeping tied parameters tied."""
    tied = find_tied_parameters(model)
    model.to(target)
    if tied:
        retie_parameters(model, tied)
    return model


class ParameterMoves:
    """Parameters that a move replaced (``old -> new``), and optimizers pointed at the new ones.

    Moving a model to an XLA device makes new parameter objects (CUDA and CPU moves change
    them in place); an optimizer built before ``prepare`` would otherwise keep updating the
    old CPU copies while the model trains on the device, as Accelerate notes for TPUs.
    """

    def __init__(self) -> None:
        self._moves: dict[int, tuple[nn.Parameter, nn.Parameter]] = {}

    def record(self, before: list[nn.Parameter], model: nn.Module) -> None:
        """Remember which of ``before`` (``model``'s parameters before a move) were replaced."""
        for old, new in zip(before, model.parameters(), strict=False):
            if old is not new:
                self._moves[id(old)] = (old, new)

    def repoint(self, optimizer: torch.optim.Optimizer) -> None:
        """Point ``optimizer``'s groups (and any state it has) at the moved parameters."""
        if not self._moves:
            return
        for group in optimizer.param_groups:
            group["params"] = [self._new(p) for p in group["params"]]
        for param in [p for p in optimizer.state if self._new(p) is not p]:
            new = self._new(param)
            optimizer.state[new] = _to_device(optimizer.state.pop(param), new.device)

    def _new(self, param: Any) -> Any:
        pair = self._moves.get(id(param))
        return pair[1] if pair is not None and pair[0] is param else param


def _to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {key: _to_device(item, device) for key, item in value.items()}
    return value
