"""The hook that runs a module on its execution device, and attaching it over a model.

:class:`AlignDevicesHook` moves a module's inputs (and, when asked, its weights) to the
execution device before ``forward``. With ``offload`` the weights live elsewhere between calls
(a state dict in CPU memory, or files on disk, behind a ``weights_map``): the module holds
them on ``meta`` (no memory), the hook puts them on the device just before ``forward`` and
back on ``meta`` after it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..ops import find_device, send_to_device
from .hooks import ModelHook, add_hook_to_module
from .offload_store import PrefixedDataset
from .tensors import (
    Device,
    TiedParamsMap,
    as_device,
    get_non_persistent_buffers,
    named_module_tensors,
    set_module_tensor_to_device,
)

__all__ = [
    "AlignDevicesHook",
    "attach_align_device_hook",
    "attach_align_device_hook_on_blocks",
    "attach_execution_device_hook",
]

SkipKeys = str | list[str] | None


def _is_meta(device: Device | None) -> bool:
    return device is not None and as_device(device).type == "meta"


@dataclass(eq=False, repr=False)
class AlignDevicesHook(ModelHook):
    """Run a module on ``execution_device``, its weights offloaded between calls if asked.

    Args:
        execution_device: where inputs and weights go for ``forward`` (None: they stay).
        offload: keep the weights on ``meta`` between calls, taking them from ``weights_map``.
        io_same_device: give the output back on the device the input came from.
        weights_map: name -> tensor (possibly read lazily from disk) for the offloaded
            weights; by default a CPU copy of the module's own.
        offload_buffers: offload the buffers with the parameters (else they stay on the
            execution device).
        place_submodules: treat the submodules' weights as this module's (moved or offloaded
            with it).
        skip_keys: keyword arguments and output keys left where they are.
        tied_params_map: weights of tied groups already put on a device (shared, not copied).
    """

    execution_device: Device | None = None
    offload: bool = False
    io_same_device: bool = False
    weights_map: Mapping[str, Any] | None = None
    offload_buffers: bool = False
    place_submodules: bool = False
    skip_keys: SkipKeys = None
    tied_params_map: TiedParamsMap | None = None
    input_device: torch.device | None = field(default=None, init=False)
    original_devices: dict[str, torch.device] = field(default_factory=dict, init=False)
    tied_params_names: set[str] = field(default_factory=set, init=False)
    tied_pointers_to_remove: set[tuple[int, torch.device]] = field(default_factory=set, init=False)

    def __repr__(self) -> str:
        return (
            f"AlignDevicesHook(execution_device={self.execution_device}, offload={self.offload}, "
            f"io_same_device={self.io_same_device}, offload_buffers={self.offload_buffers}, "
            f"place_submodules={self.place_submodules}, skip_keys={self.skip_keys!r})"
        )

    def _offloaded(self, module: nn.Module) -> list[str]:
        """The names of the weights this hook offloads (persistent buffers only, if any)."""
        tensors = named_module_tensors(
            module,
            include_buffers=self.offload_buffers,
            recurse=self.place_submodules,
            remove_non_persistent=True,
        )
        return [name for name, _ in tensors]

    def init_hook(self, module: nn.Module) -> nn.Module:
        if _is_meta(self.execution_device):
            self.tied_params_map = None  # data pointers of meta tensors are all zero
        device = self.execution_device
        if not self.offload:
            if device is not None:
                for name, _ in named_module_tensors(module, recurse=self.place_submodules):
                    set_module_tensor_to_device(
                        module, name, device, tied_params_map=self.tied_params_map
                    )
            return module
        everything = named_module_tensors(module, recurse=self.place_submodules)
        self.original_devices = {name: tensor.device for name, tensor in everything}
        if self.weights_map is None:
            self.weights_map = {
                name: tensor.to("cpu")
                for name, tensor in named_module_tensors(
                    module, include_buffers=self.offload_buffers, recurse=self.place_submodules
                )
            }
        for name in self._offloaded(module):
            current = module.get_parameter(name) if _is_parameter(module, name) else None
            tied = self.tied_params_map
            if current is not None and tied is not None and current.data_ptr() in tied:
                self.tied_params_names.add(name)
            set_module_tensor_to_device(module, name, "meta")
        if device is not None:
            if self.offload_buffers:
                kept = sorted(
                    get_non_persistent_buffers(module, recurse=self.place_submodules, fqns=True)
                )
            else:
                kept = [name for name, _ in module.named_buffers(recurse=self.place_submodules)]
            for name in kept:
                set_module_tensor_to_device(
                    module, name, device, tied_params_map=self.tied_params_map
                )
        return module

    def _target(self, name: str) -> Device:
        if self.execution_device is not None:
            return self.execution_device
        original = self.original_devices.get(name)
        return original if original is not None and original.type != "meta" else "cpu"

    def _statistics(self, name: str, value: torch.Tensor | None) -> torch.Tensor | None:
        """The ``SCB`` statistics stored beside an 8-bit weight, if any."""
        if value is None or value.dtype != torch.int8 or "weight" not in name:
            return None
        assert self.weights_map is not None
        scb = name.replace("weight", "SCB")
        return self.weights_map.get(scb)

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        if self.io_same_device:
            self.input_device = find_device([args, kwargs])
        if self.offload:
            assert self.weights_map is not None, "init_hook was not run"
            self.tied_pointers_to_remove = set()
            tied = self.tied_params_map
            for name in self._offloaded(module):
                value = self.weights_map[name]
                target = self._target(name)
                if tied is not None and value is not None:
                    pointer = value.data_ptr()
                    if name in self.tied_params_names and pointer not in tied:
                        tied[pointer] = {}
                    if pointer in tied and as_device(target) not in tied[pointer]:
                        self.tied_pointers_to_remove.add((pointer, as_device(target)))
                set_module_tensor_to_device(
                    module,
                    name,
                    target,
                    value=value,
                    fp16_statistics=self._statistics(name, value),
                    tied_params_map=tied,
                )
        if self.execution_device is None:
            return args, kwargs
        device = self.execution_device
        return send_to_device(args, device), send_to_device(
            kwargs, device, skip_keys=self.skip_keys
        )

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        if self.offload:
            for name in self._offloaded(module):
                set_module_tensor_to_device(module, name, "meta")
            tied = self.tied_params_map
            for pointer, device in self.tied_pointers_to_remove:
                if tied is not None:
                    tied.get(pointer, {}).pop(device, None)
            self.tied_pointers_to_remove = set()
        if self.io_same_device and self.input_device is not None:
            output = send_to_device(output, self.input_device, skip_keys=self.skip_keys)
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        if self.offload:
            weights = self.weights_map or {}
            for name, device in self.original_devices.items():
                if device.type == "meta":
                    continue
                value = weights.get(name)
                set_module_tensor_to_device(
                    module, name, device, value=value, fp16_statistics=self._statistics(name, value)
                )
        return module


def _is_parameter(module: nn.Module, name: str) -> bool:
    path, _, attr = name.rpartition(".")
    owner = module.get_submodule(path) if path else module
    return attr in owner._parameters


def attach_execution_device_hook(
    module: nn.Module,
    execution_device: Device,
    skip_keys: SkipKeys = None,
    preload_module_classes: list[str] | None = None,
    tied_params_map: TiedParamsMap | None = None,
) -> None:
    """Give every module under ``module`` that holds weights and has no hook yet an
    :class:`AlignDevicesHook` to ``execution_device`` (no offload). The modules of a class in
    ``preload_module_classes`` get one for themselves and nothing below them."""
    if "_hf_hook" not in module.__dict__ and len(module.state_dict()) > 0:
        hook = AlignDevicesHook(
            execution_device, skip_keys=skip_keys, tied_params_map=tied_params_map
        )
        add_hook_to_module(module, hook)
    if preload_module_classes is not None and type(module).__name__ in preload_module_classes:
        return
    for child in module.children():
        attach_execution_device_hook(
            child,
            execution_device,
            skip_keys=skip_keys,
            preload_module_classes=preload_module_classes,
            tied_params_map=tied_params_map,
        )


def _named_children(module: nn.Module, module_name: str) -> Iterator[tuple[str, nn.Module]]:
    """``module``'s children under their full names (``module_name`` is ``module``'s)."""
    for child_name, child in module.named_children():
        yield (f"{module_name}.{child_name}" if module_name else child_name), child


def attach_align_device_hook(
    module: nn.Module,
    execution_device: Device | None = None,
    offload: bool = False,
    weights_map: Mapping[str, Any] | None = None,
    offload_buffers: bool = False,
    module_name: str = "",
    skip_keys: SkipKeys = None,
    preload_module_classes: list[str] | None = None,
    tied_params_map: TiedParamsMap | None = None,
) -> None:
    """Attach an :class:`AlignDevicesHook` to every module under ``module`` (itself included)
    that holds parameters or buffers of its own, chained after any hook it has.

    Args:
        module: the model, or a part of it called ``module_name`` in ``weights_map``.
        execution_device, offload, offload_buffers, skip_keys, tied_params_map: as for
            :class:`AlignDevicesHook`.
        weights_map: the offloaded weights by full name (each module reads its own through a
            prefix).
        module_name: ``module``'s name in ``weights_map``.
        preload_module_classes: class names whose instances load every weight below them at
            the start of their own ``forward`` (for modules that use a submodule's weights
            without calling it).
    """

    def attach(module: nn.Module, module_name: str) -> None:
        preload = (
            preload_module_classes is not None and type(module).__name__ in preload_module_classes
        )
        full_offload = offload and preload
        if next(named_module_tensors(module), None) is not None or full_offload:
            prefix = f"{module_name}." if module_name else ""
            hook = AlignDevicesHook(
                execution_device=execution_device,
                offload=offload,
                weights_map=PrefixedDataset(weights_map, prefix)
                if weights_map is not None
                else None,
                offload_buffers=offload_buffers,
                place_submodules=full_offload,
                skip_keys=skip_keys,
                tied_params_map=tied_params_map,
            )
            add_hook_to_module(module, hook, append=True)
        if full_offload:
            return
        for child_name, child in _named_children(module, module_name):
            attach(child, child_name)

    attach(module, module_name)


def attach_align_device_hook_on_blocks(
    module: nn.Module,
    execution_device: Device | Mapping[str, Device | None] | None = None,
    offload: bool | Mapping[str, bool] = False,
    weights_map: Mapping[str, Any] | None = None,
    offload_buffers: bool = False,
    module_name: str = "",
    skip_keys: SkipKeys = None,
    preload_module_classes: list[str] | None = None,
    tied_params_map: TiedParamsMap | None = None,
) -> None:
    """Attach the hooks a device map asks for: each block named in ``execution_device`` /
    ``offload`` (module name -> device / whether it is offloaded) runs on its device; the
    model itself (``""``) brings the output back to where the input came from.

    With one device and one ``offload`` for everything, the whole module gets one hook (or,
    offloaded, one per module that holds weights).
    """
    common: dict[str, Any] = {"skip_keys": skip_keys, "tied_params_map": tied_params_map}
    if not isinstance(execution_device, Mapping) and not isinstance(offload, Mapping):
        if offload:
            attach_align_device_hook(
                module,
                execution_device=execution_device,
                offload=True,
                weights_map=weights_map,
                offload_buffers=offload_buffers,
                module_name=module_name,
                **common,
            )
        else:
            hook = AlignDevicesHook(
                execution_device=execution_device,
                io_same_device=True,
                place_submodules=True,
                **common,
            )
            add_hook_to_module(module, hook)
        return
    devices: Mapping[str, Device | None]
    if isinstance(execution_device, Mapping):
        devices = execution_device
    else:
        assert isinstance(offload, Mapping)
        devices = dict.fromkeys(offload, execution_device)
    offloads = offload if isinstance(offload, Mapping) else dict.fromkeys(devices, offload)

    def attach(module: nn.Module, module_name: str) -> None:
        if module_name in devices and module_name in offloads:
            device = devices[module_name]
            if not offloads[module_name]:
                hook = AlignDevicesHook(
                    execution_device=device,
                    offload_buffers=offload_buffers,
                    io_same_device=module_name == "",
                    place_submodules=True,
                    **common,
                )
                add_hook_to_module(module, hook)
            else:
                attach_align_device_hook(
                    module,
                    execution_device=device,
                    offload=True,
                    weights_map=weights_map,
                    offload_buffers=offload_buffers,
                    module_name=module_name,
                    preload_module_classes=preload_module_classes,
                    **common,
                )
                if "_hf_hook" not in module.__dict__:
                    hook = AlignDevicesHook(
                        execution_device=device, io_same_device=module_name == "", **common
                    )
                    add_hook_to_module(module, hook)
            if device is not None:
                # an offloaded block's preloading modules keep their submodules hook-free
                preload = preload_module_classes if offloads[module_name] else None
                attach_execution_device_hook(
                    module, device, preload_module_classes=preload, **common
                )
        elif module_name == "":
            hook = AlignDevicesHook(execution_device=devices.get(""), io_same_device=True, **common)
            add_hook_to_module(module, hook)
        for child_name, child in _named_children(module, module_name):
            attach(child, child_name)

    attach(module, module_name)
