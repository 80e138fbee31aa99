"""Wrap policies: which submodules become their own FSDP unit (and are checkpointed)."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Iterable
from typing import Any

from torch import nn
from torch.distributed.fsdp.wrap import (
    size_based_auto_wrap_policy,
    transformer_auto_wrap_policy,
)

__all__ = [
    "DEFAULT_MIN_NUM_PARAMS",
    "find_layer_classes",
    "module_predicate",
    "resolve_ignored_modules",
    "size_based_auto_wrap_policy",
    "transformer_auto_wrap_policy",
]

DEFAULT_MIN_NUM_PARAMS = 100_000_000  # torch's own default for size_based_auto_wrap_policy


def find_layer_classes(model: nn.Module, names: Iterable[str]) -> set[type[nn.Module]]:
    """The classes called ``names`` among ``model``'s submodules (clear error when missing)."""
    by_name = {type(m).__name__: type(m) for m in model.modules()}
    found: set[type[nn.Module]] = set()
    for name in names:
        if name not in by_name:
            raise ValueError(
                f"transformer_cls_names_to_wrap names {name!r}, but the model has no module of "
                f"that class; its classes are {sorted(by_name)}."
            )
        found.add(by_name[name])
    return found


def _accepts_fsdp1_arguments(fn: Callable[..., Any]) -> bool:
    """True for torch-style policies ``fn(module, recurse, nonwrapped_numel)``."""
    target = fn.func if isinstance(fn, functools.partial) else fn
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False
    return "recurse" in params and "nonwrapped_numel" in params


def module_predicate(policy: Any) -> Callable[[nn.Module], bool] | None:
    """A ``module -> bool`` predicate from an FSDP1-style policy or a plain predicate."""
    if policy is None:
        return None
    if hasattr(policy, "_module_classes"):  # torch ModuleWrapPolicy
        classes = tuple(policy._module_classes)
        return lambda module: isinstance(module, classes)
    if _accepts_fsdp1_arguments(policy):

        def predicate(module: nn.Module) -> bool:
            numel = sum(p.numel() for p in module.parameters())
            return bool(policy(module=module, recurse=False, nonwrapped_numel=numel))

        return predicate
    return lambda module: bool(policy(module))


def resolve_ignored_modules(
    model: nn.Module, ignored: Iterable[nn.Module] | str | None
) -> list[nn.Module]:
    """The modules that FSDP leaves alone: given as modules, or as a regex that must
    ``fullmatch`` a module's name in ``model.named_modules()``."""
    if ignored is None:
        return []
    if isinstance(ignored, str):
        try:
            pattern = re.compile(ignored)
        except re.error as exc:
            raise ValueError(f"ignored_modules={ignored!r} is not a valid regex: {exc}.") from None
        return [m for name, m in model.named_modules() if name and pattern.fullmatch(name)]
    modules = list(ignored)
    bad = [m for m in modules if not isinstance(m, nn.Module)]
    if bad:
        raise ValueError(
            f"ignored_modules holds {type(bad[0]).__name__} objects; give nn.Module objects "
            "of the model or a regex string that fullmatches module names."
        )
    return modules
