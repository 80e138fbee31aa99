"""Loading an export (one file, shards plus an index, or the directory ``save_model`` wrote)
into a model, on the devices a device map names, and dispatching it for inference.

A device map may send modules to ``"disk"``: their weights go as files into an offload folder
(the layout of :mod:`nbaccel.modeling.offload_store`) and the model keeps them on ``meta``
until :func:`~nbaccel.dispatch_model` attaches the hooks that read them back at each call.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..modeling.allocation import infer_auto_device_map
from ..modeling.device_map import get_balanced_memory
from ..modeling.moves import find_tied_parameters, retie_parameters
from ..modeling.offload import dispatch_model
from ..modeling.offload_store import load_offloaded_weights, offload_weight, save_offload_index
from ..modeling.tensors import (
    Device,
    as_device,
    check_tied_parameters_on_same_device,
    owner_of,
    placement,
    set_module_tensor_to_device,
)
from .export import INDEX_NAMES, SINGLE_NAMES
from .files import load_object, load_tensors

__all__ = ["load_checkpoint_and_dispatch", "load_checkpoint_in_model"]

_LOGGER = logging.getLogger(__name__)
_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


def _checkpoint_files(checkpoint: str | os.PathLike[str]) -> list[Path]:
    """The weight files of a file, an index file or an export directory."""
    path = Path(checkpoint)
    if path.is_dir():
        for candidate in (*INDEX_NAMES.values(), *SINGLE_NAMES.values()):
            if (path / candidate).is_file():
                return _checkpoint_files(path / candidate)
        indexes = sorted(path.glob("*.index.json"))
        if len(indexes) == 1:
            return _checkpoint_files(indexes[0])
        if indexes:
            raise ValueError(
                f"load_checkpoint_in_model: {path} holds several index files "
                f"{[i.name for i in indexes]}; delete the irrelevant ones or pass one."
            )
        names = [*INDEX_NAMES.values(), *SINGLE_NAMES.values(), "*.index.json"]
        raise FileNotFoundError(
            f"load_checkpoint_in_model: {path} holds none of {names}; pass the directory "
            "save_model wrote, one weights file, or an index file."
        )
    if not path.is_file():
        raise FileNotFoundError(f"load_checkpoint_in_model: {path} does not exist.")
    if path.name.endswith(".json"):
        try:
            index = json.loads(path.read_text(encoding="utf-8"))
            weight_map = index.get("weight_map", index)  # a bare {name: file} map works too
            files = [path.parent / name for name in dict.fromkeys(weight_map.values())]
        except (ValueError, AttributeError, TypeError) as error:
            raise ValueError(
                f"The index {path} is corrupt: it has no readable 'weight_map' ({error})."
            ) from error
        return files
    return [path]


def _read(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        return load_tensors(path)
    return dict(load_object(path))


def _placed(name: str, device_map: dict[str, Device] | None) -> Device | None:
    """Where ``device_map`` puts weight ``name`` (its longest matching module), or None
    without a map."""
    if device_map is None:
        return None
    matches = [k for k in device_map if k == "" or name == k or name.startswith(k + ".")]
    if not matches:
        raise ValueError(
            f"load_checkpoint_in_model: device_map does not place {name!r}; add its module (or "
            "'' for the whole model)."
        )
    return device_map[max(matches, key=len)]


def _current(model: nn.Module, name: str, value: torch.Tensor) -> tuple[nn.Module, str, Any]:
    """The module holding ``name``, its attribute and the tensor there, after checking that
    ``value`` has its shape."""
    module, attr = owner_of(model, name)
    current = module._parameters[attr] if attr in module._parameters else module._buffers[attr]
    assert current is not None
    if tuple(current.shape) != tuple(value.shape):
        raise ValueError(
            f"load_checkpoint_in_model: {name!r} has shape {tuple(value.shape)} in the "
            f"checkpoint but {tuple(current.shape)} in the model."
        )
    return module, attr, current


def _target_dtype(value: torch.Tensor, current: torch.Tensor, dtype: Any) -> torch.dtype:
    if not value.is_floating_point():
        return value.dtype
    return dtype if dtype is not None else current.dtype


def _assign(
    model: nn.Module, name: str, value: torch.Tensor, device: torch.device | None, dtype: Any
) -> None:
    module, attr, current = _current(model, name, value)
    meta = current.device.type == "meta"
    target_device = device or (torch.device("cpu") if meta else current.device)
    target_dtype = _target_dtype(value, current, dtype)
    if not meta and current.device == target_device and current.dtype == target_dtype:
        with torch.no_grad():
            current.copy_(value)  # in place: the same object, so ties and references hold
        return
    new = value.to(device=target_device, dtype=target_dtype)
    if attr in module._parameters:
        module._parameters[attr] = nn.Parameter(new, requires_grad=current.requires_grad)
    else:
        module._buffers[attr] = new


def _offload(
    model: nn.Module, name: str, value: torch.Tensor, dtype: Any, folder: str, index: dict[str, Any]
) -> None:
    """Write ``name``'s value to ``folder`` and leave an empty (``meta``) tensor of the dtype
    it will have in the model."""
    _, _, current = _current(model, name, value)
    target = _target_dtype(value, current, dtype)
    set_module_tensor_to_device(model, name, "meta", dtype=target)
    offload_weight(value.to(target), name, folder, index=index)


def _share_tied_files(tied: list[list[str]], folder: str, index: dict[str, Any]) -> None:
    """A tied weight stored once in the checkpoint gets an offload entry under each of its
    names, so that every module reading it from the folder finds it."""
    for group in tied:
        stored = next((name for name in group if name in index), None)
        if stored is None:
            continue
        for name in group:
            if name not in index:
                shutil.copyfile(Path(folder) / f"{stored}.dat", Path(folder) / f"{name}.dat")
                index[name] = dict(index[stored])


def load_checkpoint_in_model(
    model: nn.Module,
    checkpoint: str | os.PathLike[str],
    device_map: dict[str, Any] | None = None,
    offload_folder: str | os.PathLike[str] | None = None,
    dtype: str | torch.dtype | None = None,
    offload_state_dict: bool = False,
    offload_buffers: bool = False,
    keep_in_fp32_modules: list[str] | None = None,
    offload_8bit_bnb: bool = False,
    strict: bool = False,
    full_state_dict: bool = True,
    broadcast_from_rank0: bool = False,
) -> None:
    """Load a checkpoint (one file, a sharded directory or an index) into ``model``.

    Args:
        model: the model (not wrapped); its parameters are filled in place where device and
            dtype already match, so tied weights stay tied.
        checkpoint: a ``.safetensors`` / ``.bin`` file, an index ``.json``, or a directory
            written by ``save_model``.
        device_map: module name -> device (``{"": device}`` puts everything on ``device``);
            ``"disk"`` writes the module's weights into ``offload_folder`` and leaves them on
            ``meta`` in the model (then :func:`~nbaccel.dispatch_model` runs it).
        offload_folder: the folder for the ``"disk"`` weights (needed when there are some).
        dtype: cast floating-point weights to this dtype.
        offload_state_dict: keep the weights bound for the CPU in a temporary folder while
            loading (less memory at once), then load them back.
        offload_buffers: write the buffers of ``"disk"`` modules to the folder too (else they
            are loaded on the CPU).
        keep_in_fp32_modules: modules whose floating-point weights stay in float32.
        strict: raise when the checkpoint and the model do not have the same keys (else warn).
        offload_8bit_bnb, full_state_dict, broadcast_from_rank0: accepted for compatibility
            (bitsandbytes, DTensor checkpoints and broadcasting from rank 0 are not run here).
    """
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype.replace("torch.", ""))
    disk = device_map is not None and any(v == "disk" for v in device_map.values())
    if disk and offload_folder is None:
        raise ValueError(
            "At least one of the model submodule will be offloaded to disk, please pass along "
            "an `offload_folder`."
        )
    folder = str(offload_folder) if offload_folder is not None else ""
    if disk:
        os.makedirs(folder, exist_ok=True)
    tied = find_tied_parameters(model)
    if device_map is not None:
        check_tied_parameters_on_same_device(tied, device_map)
    expected = set(model.state_dict().keys())
    buffers = {name for name, _ in model.named_buffers()}
    disk_index: dict[str, Any] = {}
    parked = tempfile.mkdtemp() if offload_state_dict and device_map is not None else None
    parked_index: dict[str, Any] = {}
    loaded: set[str] = set()
    unexpected: set[str] = set()
    try:
        for path in _checkpoint_files(checkpoint):
            for name, value in _read(path).items():
                if name not in expected:
                    unexpected.add(name)
                    continue
                keep_fp32 = any(
                    name == m or name.startswith(m + ".") for m in keep_in_fp32_modules or []
                )
                cast = torch.float32 if keep_fp32 and value.is_floating_point() else dtype
                place = _placed(name, device_map)
                kind = None if place is None else placement(place)
                if kind == "disk" and (offload_buffers or name not in buffers):
                    _offload(model, name, value, cast, folder, disk_index)
                elif kind == "cpu" and parked is not None:
                    _offload(model, name, value, cast, parked, parked_index)
                elif place is None:
                    _assign(model, name, value, None, cast)
                else:
                    # a "disk" module's buffers stay in memory, on the CPU
                    device = torch.device("cpu") if kind == "disk" else as_device(place)
                    _assign(model, name, value, device, cast)
                loaded.add(name)
        if disk_index:
            _share_tied_files(tied, folder, disk_index)
            save_offload_index(disk_index, folder)
        if parked is not None:
            load_offloaded_weights(model, parked_index, parked)
    finally:
        if parked is not None:
            shutil.rmtree(parked, ignore_errors=True)
    if tied:
        retie_parameters(model, tied)
    covered = {n for group in tied if loaded & set(group) for n in group}
    missing = sorted(expected - loaded - covered)
    extra = sorted(unexpected)
    if strict and (missing or extra):
        raise RuntimeError(
            f"load_checkpoint_in_model({checkpoint}): missing keys {_some(missing)}, unexpected "
            f"keys {_some(extra)}."
        )
    if extra:
        _LOGGER.warning(
            "Some weights of the model checkpoint at %s were not used when initializing %s: "
            "%s (unexpected keys). This may or may not be an issue: check that the checkpoint "
            "and the model's definition correspond.",
            checkpoint,
            type(model).__name__,
            _some(extra),
        )
    if missing:
        _LOGGER.warning(
            "load_checkpoint_in_model(%s): missing keys %s; those weights keep their values.",
            checkpoint,
            _some(missing),
        )


def _some(names: list[str]) -> str:
    return f"{names[:10]}{'...' if len(names) > 10 else ''}"


def load_checkpoint_and_dispatch(
    model: nn.Module,
    checkpoint: str | os.PathLike[str],
    device_map: str | dict[str, Device] | None = None,
    max_memory: dict[Any, int | str] | None = None,
    no_split_module_classes: list[str] | None = None,
    offload_folder: str | os.PathLike[str] | None = None,
    offload_buffers: bool = False,
    dtype: str | torch.dtype | None = None,
    offload_state_dict: bool | None = None,
    skip_keys: str | list[str] | None = None,
    preload_module_classes: list[str] | None = None,
    force_hooks: bool = False,
    strict: bool = False,
    full_state_dict: bool = True,
    broadcast_from_rank0: bool = False,
) -> nn.Module:
    """Load ``checkpoint`` into ``model`` (:func:`load_checkpoint_in_model`) and, with a
    device map, dispatch it (:func:`~nbaccel.dispatch_model`).

    Args:
        device_map: a device map, or how to make one: ``"auto"`` / ``"balanced"`` (even over
            the GPUs, then the CPU, then the disk), ``"balanced_low_0"`` (little on GPU 0) or
            ``"sequential"`` (fill each GPU in turn); None loads without dispatching.
        max_memory: device -> bytes or size string, for the strategies.
        no_split_module_classes: class names never split over devices.
        offload_state_dict: by default on when the map sends something to ``"disk"``.
        The rest: as for :func:`load_checkpoint_in_model` and
        :func:`~nbaccel.dispatch_model`.

    Returns:
        ``model``.
    """
    if isinstance(device_map, str):
        if device_map not in _STRATEGIES:
            raise ValueError(
                "If passing a string for `device_map`, please choose 'auto', 'balanced', "
                "'balanced_low_0' or 'sequential'."
            )
        budget: Mapping[Any, int | str] | None = max_memory
        if device_map != "sequential":
            budget = get_balanced_memory(
                model,
                max_memory=max_memory,
                no_split_module_classes=no_split_module_classes,
                dtype=dtype,
                low_zero=device_map == "balanced_low_0",
            )
        device_map = infer_auto_device_map(
            model,
            max_memory=budget,
            no_split_module_classes=no_split_module_classes,
            dtype=dtype,
            offload_buffers=offload_buffers,
        )
    if offload_state_dict is None:
        offload_state_dict = device_map is not None and "disk" in device_map.values()
    load_checkpoint_in_model(
        model,
        checkpoint,
        device_map=device_map,
        offload_folder=offload_folder,
        dtype=dtype,
        offload_state_dict=offload_state_dict,
        offload_buffers=offload_buffers,
        strict=strict,
        full_state_dict=full_state_dict,
        broadcast_from_rank0=broadcast_from_rank0,
    )
    if device_map is None:
        return model
    return dispatch_model(
        model,
        device_map=device_map,
        offload_dir=offload_folder,
        offload_buffers=offload_buffers,
        skip_keys=skip_keys,
        preload_module_classes=preload_module_classes,
        force_hooks=force_hooks,
    )
