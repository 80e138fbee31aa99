"""Walking a model: its modules children first, and attributes along a dotted path."""

from __future__ import annotations

import functools
from typing import Any

from torch import nn

__all__ = ["get_module_children_bottom_up", "recursive_getattr"]


def get_module_children_bottom_up(model: nn.Module, return_fqns: bool = False) -> list[Any]:
    """Every module of ``model``, children before parents (the model last); with
    ``return_fqns``, ``(qualified name, module)`` pairs."""
    stack: list[tuple[str, nn.Module]] = [("", model)]
    ordered: list[tuple[str, nn.Module]] = []
    while stack:
        prefix, current = stack.pop()
        for name, child in current.named_children():
            stack.append((f"{prefix}.{name}" if prefix else name, child))
        ordered.append((prefix, current))
    ordered.reverse()
    return ordered if return_fqns else [module for _, module in ordered]


def recursive_getattr(obj: Any, attr: str) -> Any:
    """``getattr`` along a dotted path: ``recursive_getattr(model, "encoder.layer.0")``."""
    return functools.reduce(getattr, attr.split("."), obj)
