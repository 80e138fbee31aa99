"""Choosing a device map (``device_map="auto"``): modules in order on the GPUs while they fit,
then on the CPU, then on the disk."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from .device_map import (
    Entry,
    clean_device_map,
    compute_module_sizes,
    get_max_layer_size,
    get_max_memory,
    names_list,
    splittable,
    top_entries,
)
from .moves import find_tied_parameters

__all__ = ["get_module_size_with_ties", "infer_auto_device_map"]

_LOGGER = logging.getLogger(__name__)


def _tied_partners(name: str, tied: list[list[str]]) -> list[str]:
    """The weights tied to a weight inside ``name`` that are themselves outside it."""
    inside = lambda weight: weight == name or weight.startswith(name + ".")  # noqa: E731
    return [
        weight
        for group in tied
        if any(map(inside, group)) and not all(map(inside, group))
        for weight in group
        if not inside(weight)
    ]


def get_module_size_with_ties(
    tied_params: list[str],
    module_size: int,
    module_sizes: Mapping[str, int],
    modules_to_treat: list[Entry],
) -> tuple[int, list[str], list[Any]]:
    """The bytes a module needs with the modules holding the weights tied to it (each counted
    once, the tied weights themselves once), and those modules' names and objects.

    Args:
        tied_params: the weights tied to the module, outside it.
        module_size: the module's own bytes.
        module_sizes: bytes by name (:func:`compute_module_sizes`).
        modules_to_treat: the entries still to place, where the holders are looked for.
    """
    holders: dict[str, Any] = {}
    counted: list[str] = []
    for weight in tied_params:
        for name, module in modules_to_treat:
            if weight.startswith(name + "."):
                holders.setdefault(name, module)
                counted.append(weight)
                break
    size = module_size + sum(module_sizes.get(name, 0) for name in holders)
    size -= sum(module_sizes.get(weight, 0) for weight in counted)
    return size, list(holders), list(holders.values())


def _pull(
    queue: list[Entry], limit: int, sizes: Mapping[str, int], no_split: list[str]
) -> list[Entry] | None:
    """``queue`` with its first module of at most ``limit`` bytes (searched breadth first,
    splitting what is too big) moved to the front, or None when there is none."""
    search, chosen = list(queue), None
    while search:
        name, item = search.pop(0)
        if sizes.get(name, 0) <= limit:
            chosen = name
            break
        search += [(f"{name}.{n}", v) for n, v in splittable(item, no_split)]
    if chosen is None:
        return None
    result = list(queue)
    while chosen not in [n for n, _ in result]:  # split the ancestors until it is an entry
        at = next(i for i, (n, _) in enumerate(result) if chosen.startswith(n + "."))
        name, item = result[at]
        parts = [(f"{name}.{n}", v) for n, v in splittable(item, no_split)]
        result[at : at + 1] = parts
    at = next(i for i, (n, _) in enumerate(result) if n == chosen)
    return [result[at], *result[:at], *result[at + 1 :]]


def infer_auto_device_map(
    model: nn.Module,
    max_memory: Mapping[Any, int | str] | None = None,
    no_split_module_classes: list[str] | None = None,
    dtype: str | torch.dtype | None = None,
    special_dtypes: Mapping[str, str | torch.dtype] | None = None,
    verbose: bool = False,
    clean_result: bool = True,
    offload_buffers: bool = False,
    fallback_allocation: bool = False,
) -> dict[str, Any]:
    """A device map for ``model``: modules in order on the GPUs while they fit, then on the
    CPU, then on the disk, keeping room on the main devices (GPU 0 and the CPU) for the
    largest layer that will be brought in from an offloaded place, and keeping tied weights
    on one device where possible.

    Args:
        model: the model (it may be on ``meta``).
        max_memory: device -> bytes or size string (by default what is free now).
        no_split_module_classes: class names whose instances are never split over devices
            (blocks with residual connections).
        dtype, special_dtypes: the dtypes the weights will be loaded in (see
            :func:`compute_module_sizes`).
        verbose: print each decision.
        clean_result: merge the entries of a module that all went to one device.
        offload_buffers: the buffers of offloaded modules are offloaded too (else they must fit
            on a GPU; a warning says when they may not).
        fallback_allocation: when nothing fits on a device in order, put there the first
            module that does fit.
    """
    memory = get_max_memory(max_memory)
    no_split = names_list(no_split_module_classes)
    devices = list(memory) + ([] if "disk" in memory else ["disk"])
    gpus = [d for d in devices if d not in ("cpu", "disk")]
    main_devices = ["mps"] if "mps" in gpus else ([gpus[0], "cpu"] if gpus else ["cpu"])
    sizes = compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes)
    tied = find_tied_parameters(model)
    queue = top_entries(model)
    device_map: dict[str, Any] = {}
    used = dict.fromkeys(devices, 0)
    minimum: dict[Any, int] = {}
    offloaded_buffers = 0
    current = 0

    def largest_layer() -> tuple[int, list[str]]:
        layers = [(n, m) for n, m in queue if isinstance(m, nn.Module)]
        return get_max_layer_size(layers, sizes, no_split)

    largest, largest_names = largest_layer()
    while queue:
        name, item = queue.pop(0)
        largest_names = [n for n in largest_names if n != name and not n.startswith(name + ".")]
        if not largest_names:
            largest, largest_names = largest_layer()
        device = devices[current]
        reserve = largest if device in main_devices else 0
        limit = None if device == "disk" else memory[device] - reserve
        size, names, modules = get_module_size_with_ties(
            _tied_partners(name, tied), sizes.get(name, 0), sizes, queue
        )
        holders = list(zip(names, modules, strict=True))
        if limit is None or used[device] + size <= limit:
            if verbose:
                print(f"Putting {name} (size={size}) on {device}.")
            used[device] += size
            for placed, placed_item in [(name, item), *holders]:
                device_map[placed] = device
                if device in ("cpu", "disk") and isinstance(placed_item, nn.Module):
                    offloaded_buffers += sum(
                        b.numel() * b.element_size() for b in placed_item.buffers()
                    )
            queue = [entry for entry in queue if entry[0] not in {h for h, _ in holders}]
            continue
        own_fits = used[device] + sizes.get(name, 0) <= limit
        if holders and own_fits:
            split = next(((h, m) for h, m in holders if splittable(m, no_split)), None)
            if split is not None:
                at = next(i for i, (n, _) in enumerate(queue) if n == split[0])
                parts = [(f"{split[0]}.{n}", v) for n, v in splittable(split[1], no_split)]
                queue = [(name, item), *queue[:at], *parts, *queue[at + 1 :]]
                largest, largest_names = largest_layer()
                continue
        parts = [(f"{name}.{n}", v) for n, v in splittable(item, no_split)]
        if parts and not own_fits:
            if verbose:
                print(f"Splitting {name}: it does not fit on {device}.")
            queue = parts + queue
            largest, largest_names = largest_layer()
            continue
        if fallback_allocation and used[device] == 0 and device != "disk":
            pulled = _pull(queue, memory[device] - max(largest, size), sizes, no_split)
            if pulled is not None:
                queue = [pulled[0], (name, item), *pulled[1:]]
                continue
        if used[device] == 0:
            minimum[device] = size + reserve
        used[device] += reserve
        current += 1
        queue.insert(0, (name, item))
    if clean_result:
        device_map = clean_device_map(device_map)
    room = any(memory[g] - used.get(g, 0) >= offloaded_buffers for g in gpus)
    if gpus and offloaded_buffers and not offload_buffers and not room:
        warnings.warn(
            f"Current model requires {offloaded_buffers} bytes of buffer for offloaded layers, "
            "which seems does not fit any GPU's remaining memory. If you are experiencing a "
            "OOM later, please consider using offload_buffers=True.",
            stacklevel=2,
        )
    if minimum:
        _LOGGER.info(
            "No module could be placed on these devices because of insufficient memory (the "
            "bytes each would need at least, in this allocation): %s; give them more memory or "
            "try fallback_allocation=True.",
            minimum,
        )
    return device_map
