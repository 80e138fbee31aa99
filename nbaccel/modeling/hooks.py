"""Hooks around a module's ``forward``: Accelerate's ``ModelHook`` protocol, attaching and
removing hooks, and the hook that keeps a whole model on the CPU until it runs.

A hook is attached as ``module._hf_hook`` and the original ``forward`` kept as
``module._old_forward`` (the attribute names Accelerate and Transformers use, so that either
library's helpers recognise nbaccel's hooks and the other way round). The new ``forward`` calls
``pre_forward`` (which may change the arguments), the original ``forward`` and
``post_forward`` (which may change the output).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import torch
from torch import nn

from ..memory import clear_device_cache
from ..ops import send_to_device
from ..state import PartialState

__all__ = [
    "SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING",
    "CpuOffload",
    "LayerwiseCastingHook",
    "ModelHook",
    "SequentialHook",
    "UserCpuOffloadHook",
    "add_hook_to_module",
    "attach_layerwise_casting_hooks",
    "remove_hook_from_module",
    "remove_hook_from_submodules",
]

# Methods that ``dispatch_model`` wraps on the instance (to warn about moving the model);
# removing the hooks removes the wrappers too.
ADDED_METHODS = ("to", "cuda", "npu", "xpu", "mlu", "sdaa", "musa", "neuron")
# the layers whose weights attach_layerwise_casting_hooks stores in a low-precision dtype
SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING = (
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.ConvTranspose1d,
    nn.ConvTranspose2d,
    nn.ConvTranspose3d,
    nn.Linear,
)


class ModelHook:
    """Callbacks around a module's ``forward``; unlike PyTorch's hooks they see the keyword
    arguments too. Subclass it and override what you need; every method here passes its input
    through unchanged.

    Attributes:
        no_grad: run the wrapped ``forward`` under ``torch.no_grad()``.
    """

    no_grad = False

    def init_hook(self, module: nn.Module) -> nn.Module:
        """Called once when the hook is attached; returns the module."""
        return module

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """Called before ``forward``; returns the ``(args, kwargs)`` that ``forward`` gets."""
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        """Called after ``forward``; returns what the call returns."""
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        """Called when the hook is removed; returns the module."""
        return module


class SequentialHook(ModelHook):
    """Several hooks run as one, in the order given (``add_hook_to_module(..., append=True)``
    builds one)."""

    def __init__(self, *hooks: ModelHook) -> None:
        self.hooks = hooks

    def init_hook(self, module: nn.Module) -> nn.Module:
        for hook in self.hooks:
            module = hook.init_hook(module)
        return module

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        for hook in self.hooks:
            args, kwargs = hook.pre_forward(module, *args, **kwargs)
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        for hook in self.hooks:
            output = hook.post_forward(module, output)
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        for hook in self.hooks:
            module = hook.detach_hook(module)
        return module


def _hooked_forward(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    # the attributes live in the instance's __dict__ (neither tensors nor modules)
    hook, original = module.__dict__["_hf_hook"], module.__dict__["_old_forward"]
    args, kwargs = hook.pre_forward(module, *args, **kwargs)
    if hook.no_grad:
        with torch.no_grad():
            output = original(*args, **kwargs)
    else:
        output = original(*args, **kwargs)
    return hook.post_forward(module, output)


def _is_graph_module(module: nn.Module) -> bool:
    # a torch.fx GraphModule's forward is its class's; setting one on the instance would freeze
    # the graph, so it is replaced on the class
    return "GraphModuleImpl" in str(type(module))


def _set_forward(module: nn.Module, forward: Any) -> None:
    if _is_graph_module(module):
        type(module).forward = forward
    else:
        module.forward = forward


def add_hook_to_module(module: nn.Module, hook: ModelHook, append: bool = False) -> nn.Module:
    """Attach ``hook`` to ``module`` (in place): its ``forward`` now runs the hook's
    ``pre_forward`` and ``post_forward`` around the original.

    A hook already there is replaced, or with ``append`` chained with the new one (a
    :class:`SequentialHook`, the old one first). Undo with :func:`remove_hook_from_module`.

    Returns:
        ``module``.
    """
    old = module.__dict__.get("_hf_hook")
    if append and old is not None:
        remove_hook_from_module(module)
        hook = SequentialHook(old, hook)
    if "_hf_hook" in module.__dict__ and "_old_forward" in module.__dict__:
        original = module.__dict__["_old_forward"]
    else:
        original = module.forward
        module.__dict__["_old_forward"] = original
    module = hook.init_hook(module)
    module.__dict__["_hf_hook"] = hook
    forward = functools.update_wrapper(functools.partial(_hooked_forward, module), original)
    _set_forward(module, forward)
    return module


def remove_hook_from_module(module: nn.Module, recurse: bool = False) -> nn.Module:
    """Remove the hook attached to ``module`` (its ``detach_hook`` runs) and give it back its
    original ``forward``; with ``recurse``, the same for every submodule. Works on hooks that
    Accelerate or Transformers attached as well.

    Returns:
        ``module``.
    """
    hook = module.__dict__.get("_hf_hook")
    if hook is not None:
        detach = getattr(hook, "detach_hook", None)
        if callable(detach):
            detach(module)
        del module.__dict__["_hf_hook"]
    original = module.__dict__.pop("_old_forward", None)
    if original is not None:
        _set_forward(module, original)
    for name in ADDED_METHODS:
        module.__dict__.pop(name, None)
    if recurse:
        for child in module.children():
            remove_hook_from_module(child, recurse=True)
    return module


def remove_hook_from_submodules(module: nn.Module) -> None:
    """Remove the hooks of ``module`` and of every module inside it."""
    remove_hook_from_module(module, recurse=True)


def _first_parameter_device(module: nn.Module) -> torch.device | None:
    return next((p.device for p in module.parameters()), None)


class CpuOffload(ModelHook):
    """Keep a model on the CPU until its ``forward`` runs; it then moves to
    ``execution_device`` and stays there (call ``init_hook`` again, or
    :meth:`UserCpuOffloadHook.offload`, to send it back).

    Args:
        execution_device: where the forward runs; by default the device of this process
            (``PartialState().default_device``: a GPU where there is one, else the CPU).
        prev_module_hook: the :class:`UserCpuOffloadHook` of the model that runs before this
            one in a pipeline; that model goes back to the CPU when this one starts.
    """

    def __init__(
        self,
        execution_device: str | int | torch.device | None = None,
        prev_module_hook: UserCpuOffloadHook | None = None,
    ) -> None:
        self.prev_module_hook = prev_module_hook
        if execution_device is None:
            execution_device = PartialState().default_device
        self.execution_device = execution_device

    def init_hook(self, module: nn.Module) -> nn.Module:
        return module.to("cpu")

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        previous = self.prev_module_hook
        if isinstance(previous, UserCpuOffloadHook):
            device = _first_parameter_device(previous.model)
            if device is not None and device.type != "cpu":
                previous.offload()
                clear_device_cache()
        target = _as_device(self.execution_device)
        if _first_parameter_device(module) == target:
            return args, kwargs
        module.to(target)
        return send_to_device(args, target), send_to_device(kwargs, target)


def _as_device(device: str | int | torch.device) -> torch.device:
    if isinstance(device, int):
        return torch.device("cuda", device)
    return torch.device(device)


class UserCpuOffloadHook:
    """What :func:`~nbaccel.cpu_offload_with_hook` returns: the model and its
    :class:`CpuOffload` hook, with :meth:`offload` (back to the CPU now) and :meth:`remove`."""

    def __init__(self, model: nn.Module, hook: ModelHook) -> None:
        self.model = model
        self.hook = hook

    def offload(self) -> None:
        """Move the model back to the CPU."""
        self.hook.init_hook(self.model)

    def remove(self) -> None:
        """Remove the hook: the model stays where it is and no longer moves by itself."""
        remove_hook_from_module(self.model)


class LayerwiseCastingHook(ModelHook):
    """Keep a module's weights in ``storage_dtype`` (e.g. a float8 type, to save memory) and
    cast them to ``compute_dtype`` only while its ``forward`` runs."""

    _is_stateful = False

    def __init__(
        self, storage_dtype: torch.dtype, compute_dtype: torch.dtype, non_blocking: bool
    ) -> None:
        self.storage_dtype = storage_dtype
        self.compute_dtype = compute_dtype
        self.non_blocking = non_blocking

    def init_hook(self, module: nn.Module) -> nn.Module:
        module.to(dtype=self.storage_dtype, non_blocking=self.non_blocking)
        return module

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        module.to(dtype=self.compute_dtype, non_blocking=self.non_blocking)
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        module.to(dtype=self.storage_dtype, non_blocking=self.non_blocking)
        return output


def attach_layerwise_casting_hooks(
    module: nn.Module,
    storage_dtype: torch.dtype,
    compute_dtype: torch.dtype,
    skip_modules_pattern: str | tuple[str, ...] | None = None,
    skip_modules_classes: tuple[type[nn.Module], ...] | None = None,
    non_blocking: bool = False,
) -> None:
    """Give every linear and convolution layer of ``module`` a :class:`LayerwiseCastingHook`:
    its weights are stored in ``storage_dtype`` and computed with in ``compute_dtype``.

    Args:
        module: the model (changed in place).
        storage_dtype, compute_dtype: the two dtypes.
        skip_modules_pattern: regular expressions; a module whose name matches one (and
            everything inside it) is left alone.
        skip_modules_classes: module classes left alone, with everything inside them.
        non_blocking: asynchronous casts where possible.
    """
    if isinstance(skip_modules_pattern, str):
        skip_modules_pattern = (skip_modules_pattern,)
    casts = (storage_dtype, compute_dtype, non_blocking)
    _attach_casting(module, casts, skip_modules_pattern or (), skip_modules_classes, "")


def _attach_casting(
    module: nn.Module,
    casts: tuple[torch.dtype, torch.dtype, bool],
    patterns: tuple[str, ...],
    classes: tuple[type[nn.Module], ...] | None,
    name: str,
) -> None:
    skipped = classes is not None and isinstance(module, classes)
    if skipped or any(re.search(pattern, name) for pattern in patterns):
        return
    if isinstance(module, SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING):
        add_hook_to_module(module, LayerwiseCastingHook(*casts), append=True)
        return
    for child_name, child in module.named_children():
        child_path = f"{name}.{child_name}" if name else child_name
        _attach_casting(child, casts, patterns, classes, child_path)
