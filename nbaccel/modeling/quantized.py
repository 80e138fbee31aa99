"""``prepare``'s check of a model loaded in 8-bit or 4-bit with a device map: the placements
that cannot train are refused with the way to load it instead."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..environment.availability import is_bitsandbytes_multi_backend_available

__all__ = ["check_quantized_placement"]


def _map_index(where: Any) -> int | None:
    if isinstance(where, torch.device):
        return where.index
    if isinstance(where, str):
        return torch.device(where).index if where not in ("disk", "meta") else None
    return int(where)


def check_quantized_placement(model: nn.Module, device: torch.device, distributed: bool) -> bool:
    """For a model loaded in 8-bit or 4-bit with a device map (``hf_device_map``), refuse the
    placements that cannot train, with a ``ValueError``; True when the model is such a model
    (it stays where its device map put it)."""
    quantized = getattr(model, "is_loaded_in_8bit", False) or getattr(
        model, "is_loaded_in_4bit", False
    )
    device_map = getattr(model, "hf_device_map", None)
    if not (quantized and device_map):
        return False
    places = set(device_map.values())
    if len(places) > 1 and distributed:
        raise ValueError(
            f"This model was loaded in 8-bit or 4-bit precision across several devices "
            f"({sorted(map(str, places))}); such a model cannot be trained by several "
            "processes. Load it on one device per process, e.g. "
            "device_map={'': accelerator.process_index}, or train it in one process."
        )
    cpu_ok = device.type == "cpu" and is_bitsandbytes_multi_backend_available()
    if "disk" in places or ("cpu" in places and not cpu_ok):
        raise ValueError(
            f"This model was loaded in 8-bit or 4-bit precision with CPU or disk offload "
            f"(hf_device_map places parts on {sorted(map(str, places))}); such a model cannot "
            "be trained. Load it entirely on the training device (device_map={'': device}), "
            "or, to train it on the CPU, install a bitsandbytes with several backends."
        )
    if len(places) == 1 and not cpu_ok:
        index = _map_index(next(iter(places)))
        loaded_on = torch.device(device.type) if index is None else torch.device(device.type, index)
        if loaded_on != device and (device.index is not None or index != 0):
            raise ValueError(
                f"This model was loaded in 8-bit or 4-bit precision on device {index}, but "
                f"this process trains on {device}. Load it on the training device, e.g. "
                "device_map={'': accelerator.device}."
            )
    return True
