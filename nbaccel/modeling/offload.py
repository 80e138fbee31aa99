"""Big-model inference: running a model whose weights do not all fit on the execution device.

:func:`dispatch_model` follows a device map (module name -> a GPU, ``"cpu"`` or ``"disk"``):
the modules on a device run there, and the modules mapped to ``"cpu"`` or ``"disk"`` keep their
weights in CPU memory or in files of an offload folder and get them on the execution device
only while they run (their parameters sit on ``meta`` in between). :func:`cpu_offload` and
:func:`disk_offload` do that for a whole model; :func:`cpu_offload_with_hook` moves a whole
model to the device when it runs and back to the CPU when asked.

With only a CPU, ``"cpu"`` is the execution device: modules mapped to ``"cpu"`` simply stay in
memory and those mapped to ``"disk"`` are read from their files at each call.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .aligning import AlignDevicesHook, attach_align_device_hook, attach_align_device_hook_on_blocks
from .hooks import ADDED_METHODS, CpuOffload, UserCpuOffloadHook, add_hook_to_module
from .moves import find_tied_parameters, retie_parameters
from .offload_store import INDEX_NAME, OffloadedWeightsLoader, offload_state_dict
from .tensors import (
    Device,
    TiedParamsMap,
    as_device,
    check_device_map,
    extract_submodules_state_dict,
    owner_of,
    placement,
)

__all__ = ["cpu_offload", "cpu_offload_with_hook", "disk_offload", "dispatch_model"]

_LOGGER = logging.getLogger(__name__)


def _first_device(model: nn.Module) -> torch.device:
    return next((p.device for p in model.parameters()), torch.device("cpu"))


def _offload_whole(
    model: nn.Module,
    execution_device: Device | None,
    offload_buffers: bool,
    weights_map: Mapping[str, torch.Tensor],
    preload_module_classes: list[str] | None,
) -> nn.Module:
    """Hooks for a model offloaded as a whole: the output comes back where the input was, and
    every module's weights come from ``weights_map`` while it runs."""
    device = execution_device if execution_device is not None else _first_device(model)
    add_hook_to_module(model, AlignDevicesHook(io_same_device=True), append=True)
    attach_align_device_hook(
        model,
        execution_device=device,
        offload=True,
        offload_buffers=offload_buffers,
        weights_map=weights_map,
        preload_module_classes=preload_module_classes,
    )
    return model


def cpu_offload(
    model: nn.Module,
    execution_device: torch.device | None = None,
    offload_buffers: bool = False,
    state_dict: dict[str, torch.Tensor] | None = None,
    preload_module_classes: list[str] | None = None,
) -> nn.Module:
    """Keep one copy of ``model``'s weights in CPU memory; each module gets its weights on
    ``execution_device`` (by default the device of the model's first parameter) only while it
    runs. The output comes back on the input's device.

    Args:
        model: the model (changed in place; returned).
        execution_device: where the forward runs (a GPU; the CPU works too).
        offload_buffers: offload the buffers as well (else they stay on the device).
        state_dict: the weights to keep (by default a CPU copy of the model's).
        preload_module_classes: class names whose instances load all the weights below them
            when their own forward starts.
    """
    if state_dict is None:
        state_dict = {name: tensor.to("cpu") for name, tensor in model.state_dict().items()}
    return _offload_whole(
        model, execution_device, offload_buffers, state_dict, preload_module_classes
    )


def cpu_offload_with_hook(
    model: nn.Module,
    execution_device: int | str | torch.device | None = None,
    prev_module_hook: UserCpuOffloadHook | None = None,
) -> tuple[nn.Module, UserCpuOffloadHook]:
    """Move ``model`` to the CPU now and to ``execution_device`` when it runs, where it stays
    until the returned hook's ``offload()`` (or the next model's start, for the model given as
    its ``prev_module_hook``). Suits pipelines that run one model many times in a row.

    Returns:
        ``(model, hook)``.
    """
    hook = CpuOffload(execution_device=execution_device, prev_module_hook=prev_module_hook)
    add_hook_to_module(model, hook, append=True)
    return model, UserCpuOffloadHook(model, hook)


def disk_offload(
    model: nn.Module,
    offload_dir: str | os.PathLike[str],
    execution_device: torch.device | None = None,
    offload_buffers: bool = False,
    preload_module_classes: list[str] | None = None,
) -> nn.Module:
    """Keep ``model``'s weights as memory-mapped files in ``offload_dir`` (written now unless
    the folder already holds an offload index); each module reads its weights onto
    ``execution_device`` only while it runs. Arguments as for :func:`cpu_offload`."""
    if not (Path(offload_dir) / INDEX_NAME).is_file():
        offload_state_dict(offload_dir, model.state_dict())
    weights = OffloadedWeightsLoader(save_folder=offload_dir)
    return _offload_whole(model, execution_device, offload_buffers, weights, preload_module_classes)


def _write_missing(
    model: nn.Module, offload_dir: str | os.PathLike[str], disk_modules: list[str]
) -> None:
    """Offload the weights of ``disk_modules`` that the folder's index does not hold yet (a
    folder filled by ``load_checkpoint_in_model`` already has them)."""
    index_file = Path(offload_dir) / INDEX_NAME
    index = json.loads(index_file.read_text(encoding="utf-8")) if index_file.is_file() else {}
    wanted = extract_submodules_state_dict(model.state_dict(keep_vars=True), disk_modules)
    missing = {k: v for k, v in wanted.items() if k not in index}
    empty = [k for k, v in missing.items() if v.device.type == "meta" and _is_param(model, k)]
    if empty:
        raise ValueError(
            f"dispatch_model: {empty} are on the meta device and not in {index_file}; load the "
            "weights first (load_checkpoint_and_dispatch does both)."
        )
    real = {k: v.detach() for k, v in missing.items() if v.device.type != "meta"}
    if real:
        offload_state_dict(offload_dir, real)
    if not index_file.is_file():  # disk modules without weights: an empty index
        os.makedirs(offload_dir, exist_ok=True)
        index_file.write_text("{}", encoding="utf-8")


def _is_param(model: nn.Module, name: str) -> bool:
    owner, attr = owner_of(model, name)
    return attr in owner._parameters


def _tied_map(model: nn.Module, tied: list[list[str]]) -> TiedParamsMap:
    """An empty entry for each tied weight that has data (keyed by its data pointer)."""
    found: TiedParamsMap = {}
    for group in tied:
        for name in group:
            owner, attr = owner_of(model, name)
            param = owner._parameters[attr]
            if param is not None and param.device.type != "meta":
                found[param.data_ptr()] = {}
    return found


def _moves_device(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a ``Module.to`` call names a device (not only a dtype)."""
    if kwargs.get("device") is not None:
        return True
    return any(isinstance(a, (str, int, torch.device, torch.Tensor)) for a in args)


def _guard_moves(model: nn.Module) -> None:
    """Wrap ``model.to`` / ``model.cuda`` on the instance: moving a dispatched model warns, and
    fails while some weights are offloaded (removing the hooks removes the wrappers)."""

    def guarded(method: Callable[..., Any], name: str) -> Callable[..., Any]:
        @functools.wraps(method)
        def move(*args: Any, **kwargs: Any) -> Any:
            if name != "to" or _moves_device(args, kwargs):
                _LOGGER.warning(
                    "You shouldn't move a model that is dispatched with device-map hooks."
                )
            if any(p.device.type == "meta" for p in model.parameters()):
                raise RuntimeError(
                    "You can't move a model that has some modules offloaded to cpu or disk."
                )
            return method(*args, **kwargs)

        return move

    for name in ("to", "cuda"):
        assert name in ADDED_METHODS
        model.__dict__[name] = guarded(getattr(model, name), name)


def dispatch_model(
    model: nn.Module,
    device_map: dict[str, Device],
    main_device: torch.device | None = None,
    state_dict: dict[str, torch.Tensor] | None = None,
    offload_dir: str | os.PathLike[str] | None = None,
    offload_index: dict[str, str] | None = None,
    offload_buffers: bool = False,
    skip_keys: str | list[str] | None = None,
    preload_module_classes: list[str] | None = None,
    force_hooks: bool = False,
) -> nn.Module:
    """Place ``model`` as ``device_map`` says and attach the hooks that run it across the
    devices, the CPU and the disk; sets ``model.hf_device_map``.

    Args:
        model: the model (changed in place; returned).
        device_map: module name -> device (an int for a GPU, ``"cpu"``, ``"disk"``, ...); it
            must place every weight (``""`` is the whole model).
        main_device: where offloaded modules run; by default the first device of the map
            other than ``"cpu"`` and ``"disk"`` (the CPU when there is none).
        state_dict: the CPU-offloaded modules' weights (by default taken from the model).
        offload_dir: the folder for the ``"disk"`` modules' weights (written now unless its
            index already holds them, as after ``load_checkpoint_in_model``).
        offload_index: name -> file information of weights stored elsewhere (e.g. entries
            that point into safetensors files); replaces the folder's index.
        offload_buffers: offload the offloaded modules' buffers too.
        skip_keys: keyword arguments and output keys left where they are.
        preload_module_classes: class names whose instances load all the weights below them
            when their own forward starts.
        force_hooks: attach the hooks even when the whole map is one device.
    """
    check_device_map(model, device_map)
    devices = set(device_map.values())
    if not (len(devices) > 1 or "disk" in devices or force_hooks):
        model.to(as_device(next(iter(devices))))
        model.__dict__["hf_device_map"] = dict(device_map)  # a plain attribute
        return model
    where = {name: placement(device) for name, device in device_map.items()}
    main: Device
    if main_device is not None:
        main = main_device
    else:
        on_devices = [device_map[name] for name, kind in where.items() if kind == "device"]
        main = on_devices[0] if on_devices else "cpu"
    cpu_modules = [name for name, kind in where.items() if kind == "cpu"]
    disk_modules = [name for name, kind in where.items() if kind == "disk"]
    main_kind = placement(main)
    if main_kind != "cpu" and state_dict is None and cpu_modules:
        state_dict = extract_submodules_state_dict(model.state_dict(), cpu_modules)
    if disk_modules and offload_dir is None and offload_index is None:
        raise ValueError(
            "We need an `offload_dir` to dispatch this model according to this `device_map`, "
            f"the following submodules need to be offloaded: {', '.join(disk_modules)}."
        )
    if disk_modules and offload_index is None:
        assert offload_dir is not None
        _write_missing(model, offload_dir, disk_modules)
    execution = {
        name: main if where[name] != "device" else device for name, device in device_map.items()
    }
    execution[""] = main
    off_kinds = ("disk",) if main_kind == "cpu" or str(main) == "mps" else ("cpu", "disk")
    offload = {name: kind in off_kinds for name, kind in where.items()}
    folder = offload_dir if disk_modules else None
    weights_map = None
    if state_dict is not None or folder is not None or offload_index is not None:
        weights_map = OffloadedWeightsLoader(
            state_dict=state_dict,
            save_folder=folder,
            index=offload_index,
            device=main if offload_index is not None else None,
        )
    tied = find_tied_parameters(model)
    attach_align_device_hook_on_blocks(
        model,
        execution_device=execution,
        offload=offload,
        offload_buffers=offload_buffers,
        weights_map=weights_map,
        skip_keys=skip_keys,
        preload_module_classes=preload_module_classes,
        tied_params_map=_tied_map(model, tied),
    )
    kinds = sorted({kind for kind in where.values() if kind in off_kinds})
    if kinds:
        _LOGGER.warning(
            "Some parameters are on the meta device because they were offloaded to the %s.",
            " and ".join(kinds),
        )
    retie_parameters(model, tied)  # the hooks replaced parameters; ties are made again
    _guard_moves(model)
    model.__dict__["hf_device_map"] = dict(device_map)  # a plain attribute
    return model
