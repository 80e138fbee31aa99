"""The user's model inside what ``prepare`` wrapped it in (DDP, DataParallel, FSDP,
``torch.compile``, the mixed-precision forward), and what kind of model it is."""

from __future__ import annotations

from typing import Any

from torch import nn

from ..environment.availability import is_peft_available
from ..precision import Precision
from .compiled import is_compiled_module

__all__ = ["extract_model_from_parallel", "is_peft_model", "model_has_dtensor"]


def _parallel_wrappers() -> tuple[type[Any], ...]:
    # FSDP is slow to import and only unwrapping a prepared model needs it
    from torch.distributed.fsdp import FullyShardedDataParallel

    return (nn.parallel.DistributedDataParallel, nn.DataParallel, FullyShardedDataParallel)


def _unwrap_children(module: nn.Module) -> nn.Module:
    inner = module
    while isinstance(getattr(inner, "module", None), nn.Module):
        inner = inner.module  # type: ignore[assignment]
    for name, child in list(inner.named_children()):
        setattr(inner, name, _unwrap_children(child))
    return inner


def _restore_original_forward(model: nn.Module) -> None:
    """Undo forward wrappers recorded the way Accelerate records them: the forward before
    wrapping saved as ``_original_forward`` in the model's ``__dict__``."""
    original = model.__dict__.pop("_original_forward", None)
    if original is None:
        return
    if getattr(original, "__self__", None) is model and getattr(original, "__func__", None) is (
        type(model).forward
    ):
        model.__dict__.pop("forward", None)  # the class's own forward again
    else:
        model.forward = original


def extract_model_from_parallel(
    model: Any,
    keep_fp32_wrapper: bool = True,
    keep_torch_compile: bool = True,
    recursive: bool = False,
) -> Any:
    """The user's model inside DDP / DataParallel / FSDP wrappers.

    Args:
        model: a (possibly wrapped, possibly compiled) model.
        keep_fp32_wrapper: keep the mixed-precision forward that returns float32 outputs.
        keep_torch_compile: return the compiled wrapper around the unwrapped model.
        recursive: also unwrap ``.module`` wrappers of every submodule (FSDP per layer).
    """
    compiled: Any = None
    if is_compiled_module(model) or "_orig_mod" in model.__dict__:
        compiled = model
        inner = model.__dict__.get("_orig_mod")
        model = inner if inner is not None else model._orig_mod
    wrappers = _parallel_wrappers()
    while isinstance(model, wrappers):
        model = model.module
    if recursive:
        model = _unwrap_children(model)
    if not keep_fp32_wrapper:
        Precision.unwrap_forward(model)
        _restore_original_forward(model)
    if keep_torch_compile and compiled is not None:
        if is_compiled_module(compiled):
            compiled._orig_mod = model
        else:
            compiled.__dict__["_orig_mod"] = model
        return compiled
    return model


def is_peft_model(model: nn.Module) -> bool:
    """True for a PEFT ``PeftModel`` (inside any parallel wrapper)."""
    if not is_peft_available():
        return False
    # peft is an optional package (is_peft_available found it installed)
    from peft import PeftModel

    return isinstance(extract_model_from_parallel(model), PeftModel)


def model_has_dtensor(model: nn.Module) -> bool:
    """True when some parameter of ``model`` is a ``DTensor`` (FSDP2 / tensor parallel)."""
    # DTensor is slow to import and only FSDP2 / tensor-parallel models hold it
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())
