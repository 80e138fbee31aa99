"""What a device map is chosen from: how big each module is, how much memory each device has,
and tidying a map (:mod:`.allocation` chooses one).

Sizes come from the parameters' shapes and dtypes, so a model on ``meta`` (made under
``init_empty_weights``) is measured as well as a real one.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import psutil
import torch
from torch import nn

from ..checkpoint.simple import convert_file_size_to_int, dtype_byte_size
from .tensors import named_module_tensors

__all__ = [
    "Entry",
    "calculate_maximum_sizes",
    "clean_device_map",
    "compute_module_sizes",
    "compute_module_total_buffer_size",
    "get_balanced_memory",
    "get_max_layer_size",
    "get_max_memory",
    "names_list",
    "splittable",
    "top_entries",
]

_LOGGER = logging.getLogger(__name__)
_KEEP_DTYPE = ("torch.uint", "torch.int", "torch.bool")
Entry = tuple[str, Any]  # (name, module or tensor)
MemoryMap = dict[Any, int]


def _dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, str):
        resolved = getattr(torch, dtype.replace("torch.", ""))
        assert isinstance(resolved, torch.dtype), dtype
        return resolved
    return dtype


def compute_module_sizes(
    model: nn.Module,
    dtype: str | torch.dtype | None = None,
    special_dtypes: Mapping[str, str | torch.dtype] | None = None,
    buffers_only: bool = False,
) -> defaultdict[str, int]:
    """Bytes of every module and weight of ``model`` by name (``""`` is the whole model).

    Args:
        dtype: count floating-point weights at this dtype where it is smaller (as loading
            with ``dtype=`` would store them).
        special_dtypes: weight name -> dtype, overriding ``dtype`` for those weights.
        buffers_only: count the buffers only.
    """
    target = None if dtype is None else dtype_byte_size(_dtype(dtype))
    special = {k: dtype_byte_size(_dtype(v)) for k, v in (special_dtypes or {}).items()}
    sizes: defaultdict[str, int] = defaultdict(int)
    tensors = model.named_buffers() if buffers_only else named_module_tensors(model, recurse=True)
    for name, tensor in tensors:
        own = dtype_byte_size(tensor.dtype)
        if name in special:
            per_element = special[name]
        elif target is None or str(tensor.dtype).startswith(_KEEP_DTYPE):
            per_element = own
        else:
            per_element = min(target, own)
        size = int(tensor.numel() * per_element)
        parts = name.split(".")
        for end in range(len(parts) + 1):
            sizes[".".join(parts[:end])] += size
    return sizes


def compute_module_total_buffer_size(
    model: nn.Module,
    dtype: str | torch.dtype | None = None,
    special_dtypes: Mapping[str, str | torch.dtype] | None = None,
) -> int:
    """Bytes of all of ``model``'s buffers (counted as :func:`compute_module_sizes` does)."""
    sizes = compute_module_sizes(
        model, dtype=dtype, special_dtypes=special_dtypes, buffers_only=True
    )
    return sizes.get("", 0)


def splittable(item: Any, no_split: list[str]) -> list[Entry]:
    """The parts ``item`` splits into (its own weights, then its children), or [] when it is a
    tensor, a leaf or of a class that must not be split."""
    if not isinstance(item, nn.Module) or type(item).__name__ in no_split:
        return []
    children = list(item.named_children())
    if not children:
        return []
    own = list(item.named_parameters(recurse=False)) + list(item.named_buffers(recurse=False))
    return own + children


def get_max_layer_size(
    modules: list[tuple[str, nn.Module]],
    module_sizes: Mapping[str, int],
    no_split_module_classes: list[str],
) -> tuple[int, list[str]]:
    """The largest layer among ``modules`` (and inside them): a layer is a module without
    children or one of a class in ``no_split_module_classes``.

    Returns:
        ``(size, names of the layers of that size)``.
    """
    largest, names = 0, []
    pending: list[Entry] = list(modules)
    while pending:
        name, module = pending.pop(0)
        children = list(module.named_children()) if isinstance(module, nn.Module) else []
        if children and type(module).__name__ not in no_split_module_classes:
            pending = [(f"{name}.{n}", m) for n, m in children] + pending
            continue
        size = module_sizes.get(name, 0)
        if size > largest:
            largest, names = size, [name]
        elif size == largest:
            names.append(name)
    return largest, names


def _accelerators() -> list[int]:
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


def get_max_memory(max_memory: Mapping[Any, int | str] | None = None) -> MemoryMap:
    """Bytes usable on each device, GPUs first (by index), then ``"mps"``, ``"cpu"`` and
    ``"disk"``; by default what is free on each GPU and in RAM now.

    Args:
        max_memory: device -> bytes or a size string (``{0: "10GiB", "cpu": "30GB"}``).
    """
    if max_memory is None:
        found: MemoryMap = {}
        for index in _accelerators():
            try:
                found[index] = torch.cuda.mem_get_info(index)[0]
            except RuntimeError:  # a device that cannot be used now
                _LOGGER.info("Device %s seems unavailable, skipping it.", index)
        mps = getattr(torch.backends, "mps", None)
        key = "mps" if mps is not None and mps.is_available() else "cpu"
        found[key] = psutil.virtual_memory().available
        return found
    sizes = {
        k: convert_file_size_to_int(v) if isinstance(v, str) else v for k, v in max_memory.items()
    }
    gpus = sorted(k for k in sizes if isinstance(k, int))
    count = torch.cuda.device_count()
    for index in gpus:
        if not 0 <= index < count:
            _LOGGER.warning(
                "Device %s is not available, available devices are %s", index, list(range(count))
            )
    order = gpus + [k for k in ("mps", "cpu", "disk") if k in sizes]
    unknown = [k for k in sizes if k not in order]
    if unknown:
        raise ValueError(
            f"Device {unknown[0]} is not recognized, available devices are integers (for GPUs), "
            "'mps', 'cpu' and 'disk'"
        )
    return {k: sizes[k] for k in order}


def names_list(classes: str | list[str] | None) -> list[str]:
    if classes is None:
        return []
    return [classes] if isinstance(classes, str) else list(classes)


def top_entries(model: nn.Module) -> list[Entry]:
    return (
        list(model.named_parameters(recurse=False))
        + list(model.named_children())
        + list(model.named_buffers(recurse=False))
    )


def get_balanced_memory(
    model: nn.Module,
    max_memory: Mapping[Any, int | str] | None = None,
    no_split_module_classes: list[str] | None = None,
    dtype: str | torch.dtype | None = None,
    special_dtypes: Mapping[str, str | torch.dtype] | None = None,
    low_zero: bool = False,
) -> MemoryMap:
    """A ``max_memory`` for :func:`infer_auto_device_map` that spreads ``model`` evenly over
    the GPUs (with ``low_zero``, as little as possible on GPU 0, which then has room for
    generation). With one GPU and no ``max_memory``, 90 % of its free memory."""
    user_set = max_memory is not None
    memory = get_max_memory(max_memory)
    gpus = sorted(k for k, v in memory.items() if isinstance(k, int) and v > 0)
    if not gpus:
        return memory
    if len(gpus) == 1:
        if not user_set:
            memory[gpus[0]] = int(memory[gpus[0]] * 0.9)
        return memory
    sizes = compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes)
    per_gpu = sizes[""] // (len(gpus) - 1 if low_zero else len(gpus))
    no_split = names_list(no_split_module_classes)
    block = max(
        (sizes.get(n, 0) for n, m in model.named_modules() if type(m).__name__ in no_split),
        default=0,
    )
    leaves = [sizes.get(n, 0) for n, m in model.named_modules() if not list(m.children())]
    leaves = [size for size in leaves if size > 0]
    mean_leaf = sum(leaves) // max(len(leaves), 1)
    per_gpu += int(1.25 * max(block, mean_leaf))
    for index in gpus[:-1]:  # the last GPU keeps its whole memory, in case this is short
        memory[index] = min(per_gpu, memory[index])
    if low_zero:
        rest = sum(memory[i] for i in gpus[1:])
        memory[gpus[0]] = min(max(0, sizes[""] - rest), memory[gpus[0]])
    return memory


def calculate_maximum_sizes(model: nn.Module) -> tuple[int, tuple[int, list[str]]]:
    """``(total bytes of model, (bytes of its largest layer, their names))``; Transformers'
    ``_no_split_modules`` says which classes are layers."""
    sizes = compute_module_sizes(model)
    no_split = names_list(getattr(model, "_no_split_modules", None))
    return sizes[""], get_max_layer_size(top_entries(model), sizes, no_split)


def clean_device_map(device_map: dict[str, Any], module_name: str = "") -> dict[str, Any]:
    """Merge the entries under a module that all go to one device into that module's entry
    (everything on one device becomes ``{"": device}``); only the entries under
    ``module_name`` when given. Changes ``device_map`` in place, keeping the order, and
    returns it."""

    def merge(items: list[tuple[str, Any]], prefix: str) -> list[tuple[str, Any]]:
        if len(items) == 1:
            return items
        if len({str(device) for _, device in items}) == 1:
            return [(prefix, items[0][1])]
        groups: dict[str, list[tuple[str, Any]]] = {}
        for name, device in items:
            rest = name[len(prefix) + 1 :] if prefix else name
            head = rest.split(".")[0]
            groups.setdefault(f"{prefix}.{head}" if prefix else head, []).append((name, device))
        return [entry for child, group in groups.items() for entry in merge(group, child)]

    def under(name: str) -> bool:
        return not module_name or name == module_name or name.startswith(module_name + ".")

    inside = [(k, v) for k, v in device_map.items() if under(k)]
    result: list[tuple[str, Any]] = []
    for name, device in device_map.items():
        if not under(name):
            result.append((name, device))
        elif name == inside[0][0]:  # the merged entries take the place of the first
            result += merge(inside, module_name)
    device_map.clear()
    device_map.update(result)
    return device_map
