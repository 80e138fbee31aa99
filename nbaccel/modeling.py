"""Model helpers: find tied parameters and keep them tied when a model moves device.

Moving a model to an XLA (TPU) device replaces its parameters with new ones instead of
changing them in place, so weights that were shared (an embedding tied to the output layer)
become independent copies. :func:`move_model_to_device` records the ties, moves the model and
ties again whatever the move untied.
"""

from __future__ import annotations

from types import MethodType
from typing import Any

import torch
from torch import nn

__all__ = [
    "ParameterMoves",
    "compile_regions",
    "find_tied_parameters",
    "move_model_to_device",
    "recompiled",
    "retie_parameters",
]


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


def recompiled(model: nn.Module, inner: nn.Module) -> nn.Module:
    """``inner`` inside ``model``'s ``torch.compile`` wrapper when ``model`` is compiled.

    ``model`` is a prepared model and ``inner`` the user's model taken out of its wrappers.
    When ``model`` is a compiled module whose compiled module is ``inner`` already, it comes
    back as it is; when it compiled a wrapper (DDP, FSDP), a new compiled module with the same
    settings wraps ``inner``. The prepared model is never modified. Not compiled: ``inner``.
    """
    from torch._dynamo.eval_frame import OptimizedModule

    if not isinstance(model, OptimizedModule):
        return inner
    if model._orig_mod is inner:
        return model
    return OptimizedModule(inner, model.dynamo_ctx)


def _repeated_blocks(module: nn.Module) -> bool:
    """A ``ModuleList`` whose children all share one class."""
    return (
        isinstance(module, nn.ModuleList)
        and len(module) > 0
        and all(isinstance(m, type(module[0])) for m in module)
    )


def _compile_parts(module: nn.Module, **compile_kwargs: Any) -> nn.Module:
    if _repeated_blocks(module):
        blocks: Any = module
        compiled: list[Any] = [torch.compile(m, **compile_kwargs) for m in blocks]
        return nn.ModuleList(compiled)
    if not any(_repeated_blocks(m) for m in module.modules()):
        return torch.compile(module, **compile_kwargs)  # type: ignore[return-value]
    copy = module.__class__.__new__(module.__class__)
    copy.__dict__.update(module.__dict__)
    for name, value in list(copy.__dict__.items()):  # methods bound to the original
        if isinstance(value, MethodType) and value.__self__ is module:
            copy.__dict__[name] = MethodType(value.__func__, copy)
    copy._modules = {}
    for name, child in module.named_children():
        copy.add_module(name, _compile_parts(child, **compile_kwargs))
    return copy


def compile_regions(module: nn.Module, **compile_kwargs: Any) -> nn.Module:
    """Regional compilation: each block of a repeated ``ModuleList`` (a transformer's layers)
    is compiled on its own, so the compiler's cache serves the others, and the rest of the
    model separately. Returns a new module sharing ``module``'s parameters (``module`` is
    unchanged, and reachable as ``_orig_mod``); ``compile_kwargs`` go to ``torch.compile``."""
    compiled = _compile_parts(module, **compile_kwargs)
    if "_orig_mod" not in compiled.__dict__:
        compiled.__dict__["_orig_mod"] = module
    return compiled


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
