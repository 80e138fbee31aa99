"""Accelerate's big-model inference names (device maps, CPU/disk offloading hooks).

nbaccel trains; it does not dispatch one model over several devices for inference. The names
exist so that code importing them (``from accelerate import infer_auto_device_map``) still
imports; calling one raises an error that says what to use instead. What is plain module
bookkeeping works for real: :func:`has_offloaded_params` and :func:`remove_hook_from_module`
read and undo the hooks that Accelerate (or Transformers' ``device_map``) attached.
"""

from __future__ import annotations

from typing import Any, NoReturn

from torch import nn

from ..unsupported import refuse

__all__ = [
    "attach_align_device_hook",
    "cpu_offload",
    "cpu_offload_with_hook",
    "disk_offload",
    "dispatch_model",
    "get_state_dict_from_offload",
    "has_offloaded_params",
    "infer_auto_device_map",
    "load_checkpoint_and_dispatch",
    "remove_hook_from_module",
]


def _refuse(name: str) -> NoReturn:
    refuse("big-model inference (device maps, CPU/disk offloading)", name)


def infer_auto_device_map(*args: Any, **kwargs: Any) -> NoReturn:
    """Not supported (raises ``NotImplementedError`` naming what to use instead)."""
    _refuse("infer_auto_device_map")


def load_checkpoint_and_dispatch(*args: Any, **kwargs: Any) -> NoReturn:
    """Not supported (raises ``NotImplementedError``); ``load_checkpoint_in_model`` loads a
    checkpoint into a model on one device."""
    _refuse("load_checkpoint_and_dispatch")


def dispatch_model(*args: Any, **kwargs: Any) -> NoReturn:
    """Not supported (raises ``NotImplementedError`` naming what to use instead)."""
    _refuse("dispatch_model")


def cpu_offload(*args: Any, **kwargs: Any) -> NoReturn:
    """Not supported (raises ``NotImplementedError`` naming what to use instead)."""
    _refuse("cpu_offload")


def cpu_offload_with_hook(*args: Any, **kwargs: Any) -> NoReturn:
    """Not supported (raises ``NotImplementedError`` naming what to use instead)."""
    _refuse("cpu_offload_with_hook")


def disk_offload(*args: Any, **kwargs: Any) -> NoReturn:
    """Not supported (raises ``NotImplementedError`` naming what to use instead)."""
    _refuse("disk_offload")


def get_state_dict_from_offload(*args: Any, **kwargs: Any) -> NoReturn:
    """Not supported (raises ``NotImplementedError`` naming what to use instead)."""
    _refuse("get_state_dict_from_offload")


def attach_align_device_hook(*args: Any, **kwargs: Any) -> NoReturn:
    """Not supported (raises ``NotImplementedError`` naming what to use instead)."""
    _refuse("attach_align_device_hook")


def has_offloaded_params(module: nn.Module) -> bool:
    """True when an offloading hook (Accelerate's ``_hf_hook`` with ``offload`` set) keeps
    ``module``'s parameters off its execution device; nbaccel itself never attaches one."""
    hook = getattr(module, "_hf_hook", None)
    return bool(getattr(hook, "offload", False))


def remove_hook_from_module(module: nn.Module, recurse: bool = False) -> nn.Module:
    """Remove the hook Accelerate attached to ``module`` (``_hf_hook``) and give it back its
    original ``forward``; with ``recurse``, the same for every submodule. Returns ``module``."""
    hook = module.__dict__.get("_hf_hook")
    if hook is not None:
        detach = getattr(hook, "detach_hook", None)
        if callable(detach):
            detach(module)
        del module._hf_hook
    original = module.__dict__.pop("_old_forward", None)
    if original is not None:
        module.forward = original
    if recurse:
        for child in module.children():
            remove_hook_from_module(child, recurse=True)
    return module
