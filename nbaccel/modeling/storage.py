"""Tensors that share memory, and the state dict safetensors accepts (one name per storage)."""

from __future__ import annotations

import collections
import logging
from typing import Any

import torch

__all__ = ["clean_state_dict_for_safetensors", "id_tensor_storage"]

_LOGGER = logging.getLogger(__name__)


def id_tensor_storage(tensor: torch.Tensor) -> tuple[torch.device, int, int]:
    """``(device, storage pointer, storage bytes)``: equal for tensors sharing memory."""
    try:
        storage = tensor.untyped_storage()
        return tensor.device, storage.data_ptr(), storage.nbytes()
    except (NotImplementedError, RuntimeError):  # meta tensors have no storage
        return tensor.device, 0, tensor.nelement() * tensor.element_size()


def clean_state_dict_for_safetensors(state_dict: dict[str, Any]) -> dict[str, Any]:
    """Keep one name per shared storage (safetensors refuses shared tensors; a warning names
    what was removed) and make every tensor contiguous."""
    names_by_storage: dict[Any, list[str]] = collections.defaultdict(list)
    for name, tensor in state_dict.items():
        if isinstance(tensor, torch.Tensor):
            names_by_storage[id_tensor_storage(tensor)].append(name)
    removed = {name for names in names_by_storage.values() for name in names[1:]}
    for name in removed:
        del state_dict[name]
    if removed:
        _LOGGER.warning(
            "Removed shared tensors %s while saving; check that reloading reports nothing.",
            sorted(removed),
        )
    return {k: v.contiguous() if isinstance(v, torch.Tensor) else v for k, v in state_dict.items()}
