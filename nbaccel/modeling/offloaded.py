"""Reading a model whose weights are offloaded: which modules are, bringing a module's weights
onto a device for a while, and the model's real state dict (what ``save_model`` writes).

These recognise the offloading hooks of Accelerate and Transformers too: any hook attached as
``_hf_hook`` whose ``offload`` is true (or a chain of hooks holding one).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from .tensors import Device, set_module_tensor_to_device

__all__ = [
    "align_module_device",
    "get_state_dict_from_offload",
    "get_state_dict_offloaded_model",
    "has_offloaded_params",
    "offloading_hook",
]

_LOGGER = logging.getLogger(__name__)


def offloading_hook(module: nn.Module) -> Any:
    """The hook that keeps ``module``'s weights off its execution device (its ``_hf_hook``,
    or the one inside a chain of hooks), or None."""
    hook = module.__dict__.get("_hf_hook")
    for candidate in (hook, *getattr(hook, "hooks", ())):
        if getattr(candidate, "offload", False) is True:
            return candidate
    return None


def has_offloaded_params(module: nn.Module) -> bool:
    """True when a hook keeps ``module``'s weights offloaded (on ``meta`` between calls, the
    values in CPU memory or on disk)."""
    return offloading_hook(module) is not None


@contextlib.contextmanager
def align_module_device(
    module: nn.Module, execution_device: Device | None = None
) -> Iterator[None]:
    """Context: ``module``'s own weights are real and on one device inside it.

    An offloaded module gets its weights onto its execution device (or onto
    ``execution_device`` when given) and gives them back afterwards; any other module's
    parameters move to ``execution_device`` and back (without one, nothing moves).
    """
    hook = offloading_hook(module)
    if hook is not None:
        original = hook.execution_device
        if execution_device is not None:
            hook.execution_device = execution_device
        try:
            hook.pre_forward(module)
            yield
        finally:
            hook.post_forward(module, None)
            hook.execution_device = original
        return
    if execution_device is None:
        yield
        return
    devices = {name: param.device for name, param in module.named_parameters(recurse=False)}
    try:
        for name in devices:
            set_module_tensor_to_device(module, name, execution_device)
        yield
    finally:
        for name, device in devices.items():
            set_module_tensor_to_device(module, name, device)


def _own_state(module: nn.Module, prefix: str, whole: bool) -> dict[str, torch.Tensor]:
    if whole:
        return module.state_dict(prefix=prefix)
    found: dict[str, torch.Tensor] = {}
    module._save_to_state_dict(found, prefix, keep_vars=False)
    return found


def get_state_dict_offloaded_model(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict of ``model`` with the real values of its offloaded weights, on the CPU,
    brought in one module at a time (each offloaded module must fit in CPU memory). Weights
    still on ``meta`` with no offloaded value are left out, with a warning."""
    state: dict[str, torch.Tensor] = {}
    placeholders: list[str] = []

    def visit(module: nn.Module, prefix: str) -> None:
        hook = offloading_hook(module)
        whole = hook is not None and bool(getattr(hook, "place_submodules", False))
        try:
            with align_module_device(module, "cpu"):
                for key, tensor in _own_state(module, prefix, whole).items():
                    if tensor.device.type == "meta":
                        placeholders.append(key)
                    else:
                        state[key] = tensor.to("cpu")
        except MemoryError:
            raise MemoryError(
                "Offloaded module must fit in CPU memory to call save_model!"
            ) from None
        if not whole:
            for name, child in module.named_children():
                visit(child, f"{prefix}{name}.")

    visit(model, "")
    missing = [key for key in placeholders if key not in state]
    if missing:
        _LOGGER.warning(
            "The following tensors were not saved because they were still on meta device: %s",
            missing,
        )
    return state


def get_state_dict_from_offload(
    module: nn.Module,
    module_name: str,
    state_dict: dict[str, Any],
    device_to_put_offload: Device = "cpu",
) -> dict[str, Any]:
    """Fill ``state_dict``'s entries for ``module``'s weights with their values.

    Args:
        module: the module (offloaded or not).
        module_name: the full name of one of its weights (``"decoder.linear.weight"``); the
            module's entries are the keys under the same prefix.
        state_dict: the entries to fill (their current values are replaced).
        device_to_put_offload: where an offloaded module's weights are put (the others stay
            where they are).

    Returns:
        ``state_dict``.
    """
    root = module_name.rpartition(".")[0]
    device = device_to_put_offload if has_offloaded_params(module) else None
    with align_module_device(module, device):
        for key, tensor in module.state_dict().items():
            full = f"{root}.{key}" if root else key
            if full in state_dict:
                state_dict[full] = tensor
    return state_dict
