"""``torch.compile`` and models: is a module compiled, compile a model region by region, and
keep a prepared model's compiled wrapper around the model inside it."""

from __future__ import annotations

from types import MethodType
from typing import Any

import torch
from torch import nn

__all__ = ["compile_regions", "has_compiled_regions", "is_compiled_module", "recompiled"]


def is_compiled_module(module: nn.Module) -> bool:
    """True for a ``torch.compile``'d module (an ``OptimizedModule``)."""
    dynamo = getattr(torch, "_dynamo", None)
    return dynamo is not None and isinstance(module, dynamo.eval_frame.OptimizedModule)


def has_compiled_regions(module: nn.Module) -> bool:
    """True when some submodule of ``module`` is a ``torch.compile``'d module."""
    if not module._modules:
        return False
    return any(is_compiled_module(sub) for sub in module.modules())


def recompiled(model: nn.Module, inner: nn.Module) -> nn.Module:
    """``inner`` inside ``model``'s ``torch.compile`` wrapper when ``model`` is compiled.

    ``model`` is a prepared model and ``inner`` the user's model taken out of its wrappers.
    When ``model`` is a compiled module whose compiled module is ``inner`` already, it comes
    back as it is; when it compiled a wrapper (DDP, FSDP), a new compiled module with the same
    settings wraps ``inner``. The prepared model is never modified. Not compiled: ``inner``.
    """
    # torch._dynamo is slow to import and only a compiled model needs it
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
