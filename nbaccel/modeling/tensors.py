"""One tensor of a module at a time: listing a module's parameters and buffers, putting one on
a device (or on ``meta``, with no memory) without breaking the module, and checking what a
device map says.

A device map is ``{module name: device}``: a device is an int (a GPU), a string
(``"cpu"``, ``"cuda:1"``, ``"mps"``), a ``torch.device``, or ``"disk"``; the name ``""`` is
the whole model, and a module's entry covers everything inside it.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from ..memory import clear_device_cache

__all__ = [
    "Device",
    "TiedParamsMap",
    "as_device",
    "check_device_map",
    "check_tied_parameters_on_same_device",
    "device_of",
    "extract_submodules_state_dict",
    "get_non_persistent_buffers",
    "named_module_tensors",
    "owner_of",
    "placement",
    "set_module_tensor_to_device",
]

Device = int | str | torch.device
# data pointer of a tied weight's original -> device -> the tensor already put there
TiedParamsMap = dict[int, dict[Any, torch.Tensor]]

_LOGGER = logging.getLogger(__name__)
_KEEP_DTYPE = ("torch.uint", "torch.int", "torch.bool")


def as_device(device: Device) -> torch.device:
    """``device`` as a ``torch.device``; an int is that accelerator (a CUDA GPU, or the index
    on the machine's accelerator of another kind)."""
    if isinstance(device, int):
        accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6
        if accelerator is not None and accelerator.is_available():
            current = accelerator.current_accelerator()
            if current is not None:
                return torch.device(current.type, device)
        return torch.device("cuda", device)
    return torch.device(device)


def placement(device: Device) -> str:
    """What a device map's entry asks for: ``"disk"``, ``"cpu"`` or ``"device"`` (a GPU or
    another accelerator)."""
    if isinstance(device, str) and device == "disk":
        return "disk"
    return "cpu" if as_device(device).type == "cpu" else "device"


def owner_of(module: nn.Module, tensor_name: str) -> tuple[nn.Module, str]:
    """The module that holds ``tensor_name`` (a dotted name under ``module``) and its own name
    for it."""
    path, _, attr = tensor_name.rpartition(".")
    owner = module
    for part in path.split(".") if path else []:
        child = getattr(owner, part, None)
        if not isinstance(child, nn.Module):
            raise ValueError(f"{type(owner).__name__} has no submodule {part!r} ({tensor_name}).")
        owner = child
    return owner, attr


def get_non_persistent_buffers(
    module: nn.Module, recurse: bool = False, fqns: bool = False
) -> set[str]:
    """The names of ``module``'s buffers that its state dict leaves out (registered with
    ``persistent=False``); with ``recurse`` also its submodules' (with ``fqns``, as full
    dotted names; otherwise as each submodule names them)."""
    names = set(module._non_persistent_buffers_set)
    if recurse:
        for prefix, child in module.named_modules():
            own = child._non_persistent_buffers_set
            names |= {f"{prefix}.{b}" if prefix else b for b in own} if fqns else set(own)
    return names


def named_module_tensors(
    module: nn.Module,
    include_buffers: bool = True,
    recurse: bool = False,
    remove_non_persistent: bool = False,
) -> Iterator[tuple[str, torch.Tensor]]:
    """``module``'s parameters, then (with ``include_buffers``) its buffers, by name; with
    ``recurse`` those of its submodules too; ``remove_non_persistent`` leaves out the buffers
    that the state dict leaves out."""
    yield from module.named_parameters(recurse=recurse)
    if not include_buffers:
        return
    skipped = (
        get_non_persistent_buffers(module, recurse=recurse, fqns=True)
        if remove_non_persistent
        else set()
    )
    for name, buffer in module.named_buffers(recurse=recurse):
        if name not in skipped:
            yield name, buffer


def device_of(tensor: torch.Tensor | None) -> torch.device | None:
    """The device of ``tensor`` (None for None)."""
    return None if tensor is None else tensor.device


def _tied_reuse(
    tied: TiedParamsMap | None, device: Any, *candidates: torch.Tensor | None
) -> torch.Tensor | None:
    if tied is None:
        return None
    for tensor in candidates:
        if tensor is not None and device in tied.get(tensor.data_ptr(), {}):
            return tied[tensor.data_ptr()][device]
    return None


def _record_tied(
    tied: TiedParamsMap | None, device: Any, new: torch.Tensor, *keys: torch.Tensor | None
) -> None:
    if tied is None:
        return
    for tensor in keys:
        if tensor is not None and tensor.data_ptr() in tied:
            tied[tensor.data_ptr()].setdefault(device, new)
            return


def _cast(value: torch.Tensor, dtype: torch.dtype | None, non_blocking: bool) -> torch.Tensor:
    if dtype is None or str(value.dtype).startswith(_KEEP_DTYPE):
        return value
    return value.to(dtype, non_blocking=non_blocking)


def _as_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    if isinstance(dtype, str):
        resolved = getattr(torch, dtype.replace("torch.", ""))
        assert isinstance(resolved, torch.dtype), dtype
        return resolved
    return dtype


def _new_parameter(old: torch.Tensor, data: torch.Tensor) -> nn.Parameter:
    cls = type(old) if isinstance(old, nn.Parameter) else nn.Parameter
    try:
        fresh = cls(data, requires_grad=old.requires_grad)
    except TypeError:  # a subclass with other constructor arguments
        fresh = nn.Parameter(data, requires_grad=old.requires_grad)
    marker = old.__dict__.get("_is_hf_initialized")
    if marker is not None:
        fresh.__dict__["_is_hf_initialized"] = marker
    return fresh


def set_module_tensor_to_device(
    module: nn.Module,
    tensor_name: str,
    device: Device,
    value: torch.Tensor | None = None,
    dtype: str | torch.dtype | None = None,
    fp16_statistics: torch.Tensor | None = None,
    tied_params_map: TiedParamsMap | None = None,
    non_blocking: bool = False,
    clear_cache: bool = True,
) -> None:
    """Put the parameter or buffer ``tensor_name`` of ``module`` on ``device``, with the data
    of ``value`` when given (needed when it is on ``meta`` now).

    A parameter stays a parameter of its class (``param.to(device)`` alone would give a plain
    tensor the module no longer sees); ``device="meta"`` frees its memory.

    Args:
        module: the module (the name is dotted from it).
        tensor_name: e.g. ``"decoder.layers.0.weight"``.
        device: the device, or ``"meta"``.
        value: the new data (same shape); cast to the current dtype unless ``dtype`` is given.
        dtype: cast floating-point data to this dtype (integer and bool data keep theirs).
        fp16_statistics: the ``SCB`` statistics of an 8-bit weight, set on the new parameter.
        tied_params_map: weights already put on a device for a tied group (keyed by the data
            pointer of the group's original), reused instead of copied again.
        non_blocking: asynchronous copies where possible.
        clear_cache: empty the accelerator's cache after moving to it.
    """
    owner, attr = owner_of(module, tensor_name)
    if attr not in owner._parameters and attr not in owner._buffers:
        raise ValueError(f"{type(owner).__name__} has no parameter or buffer named {attr!r}.")
    is_buffer = attr in owner._buffers
    old = owner._buffers[attr] if is_buffer else owner._parameters[attr]
    if old is None:
        raise ValueError(f"{tensor_name} is None in {type(owner).__name__}; nothing to move.")
    key = as_device(device)
    reused = _tied_reuse(tied_params_map, key, value, old)
    if reused is not None and not is_buffer:
        owner._parameters[attr] = reused  # type: ignore[assignment]
        return
    target = as_device(device)
    if old.device.type == "meta" and target.type != "meta" and value is None:
        raise ValueError(
            f"{tensor_name} is on the meta device: give a `value` to put it on {device}."
        )
    wanted = _as_dtype(dtype)
    with torch.no_grad():
        if value is not None:
            if not isinstance(value, torch.Tensor):
                value = torch.tensor(value)
            if tuple(value.shape) != tuple(old.shape):
                raise ValueError(
                    f'Trying to set a tensor of shape {value.shape} in "{attr}" (which has '
                    f"shape {old.shape}), this looks incorrect."
                )
            source = value.to(old.dtype) if wanted is None else _cast(value, wanted, non_blocking)
            new = source.to(target, non_blocking=non_blocking)
        else:
            new = _cast(old.to(target, non_blocking=non_blocking), wanted, non_blocking)
        if is_buffer:
            owner._buffers[attr] = new
        elif new is not old or not isinstance(old, nn.Parameter):
            fresh = _new_parameter(old, new.detach() if isinstance(new, nn.Parameter) else new)
            if fp16_statistics is not None:
                fresh.SCB = fp16_statistics.to(target, non_blocking=non_blocking)  # type: ignore[attr-defined]
            owner._parameters[attr] = fresh
            new = fresh
    if clear_cache and target.type not in ("cpu", "meta"):
        clear_device_cache()
    _record_tied(tied_params_map, key, new, old, value)


def extract_submodules_state_dict(
    state_dict: Mapping[str, torch.Tensor], submodule_names: list[str]
) -> dict[str, torch.Tensor]:
    """The entries of ``state_dict`` that belong to the named submodules (``"layers.1"`` takes
    ``layers.1.*``, not ``layers.10.*``)."""
    result = {}
    for module in submodule_names:
        result.update(
            {
                name: tensor
                for name, tensor in state_dict.items()
                if name == module or name.startswith(module + ".")
            }
        )
    return result


def _covers(module: str, name: str) -> bool:
    return module == "" or name == module or name.startswith(module + ".")


def check_device_map(model: nn.Module, device_map: Mapping[str, Device]) -> None:
    """Raise ``ValueError`` when ``device_map`` leaves a weight of ``model`` without a device;
    warn about entries that name no submodule."""
    modules = dict(model.named_modules())
    unknown = [name for name in device_map if name != "" and name not in modules]
    if unknown:
        warnings.warn(
            f"The following device_map keys do not match any submodules in the model: {unknown}",
            UserWarning,
            stacklevel=2,
        )
    left = [n for n in model.state_dict() if not any(_covers(m, n) for m in device_map)]
    if left:
        raise ValueError(
            "The device_map provided does not give any device for the following parameters: "
            + ", ".join(left)
        )


def _placed(name: str, device_map: Mapping[str, Device]) -> Device | None:
    matches = [module for module in device_map if _covers(module, name)]
    return device_map[max(matches, key=len)] if matches else None


def check_tied_parameters_on_same_device(
    tied_params: list[list[str]], device_map: Mapping[str, Device]
) -> None:
    """Warn when the weights of one tied group are placed on different devices (each device
    would get its own copy; the tie holds only where they share one)."""
    for group in tied_params:
        devices = {str(_placed(name, device_map)) for name in group}
        if len(devices) > 1:
            _LOGGER.warning(
                "Tied parameters are on different devices: %s. Please modify your custom "
                "device map or set `device_map='auto'`.",
                {name: _placed(name, device_map) for name in group},
            )
