"""Weights kept off the device: a folder of raw arrays on disk, and the maps that hand them back
one name at a time.

The folder holds one ``NAME.dat`` per weight (its raw bytes, read back memory-mapped) and
``index.json``: ``{name: {"dtype": ..., "shape": [...]}}``. The layout is Accelerate's, so a
folder written by either library is read by the other. ``bfloat16`` (which NumPy lacks) is
stored as ``int16`` bytes and other dtypes NumPy lacks (float8) as integers of their size; the
index keeps the real dtype's name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from torch import nn

from .tensors import set_module_tensor_to_device

__all__ = [
    "INDEX_NAME",
    "OffloadedWeightsLoader",
    "PrefixedDataset",
    "load_offloaded_weight",
    "load_offloaded_weights",
    "offload_state_dict",
    "offload_weight",
    "save_offload_index",
]

INDEX_NAME = "index.json"
_STAND_INS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
PathLike = str | os.PathLike[str]


def _numpy_name(dtype: torch.dtype) -> str | None:
    """NumPy's name for ``dtype``, or None when NumPy has no such type."""
    try:
        return str(torch.empty(0, dtype=dtype).numpy().dtype)
    except TypeError:
        return None


def offload_weight(
    weight: torch.Tensor,
    weight_name: str,
    offload_folder: PathLike,
    index: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Write ``weight`` to ``offload_folder/weight_name.dat`` and record its dtype and shape in
    ``index`` (when given).

    Returns:
        ``index``.
    """
    data = weight.detach().cpu().contiguous()
    name = str(data.dtype).removeprefix("torch.")
    if _numpy_name(data.dtype) is None:
        data = data.view(_STAND_INS[data.element_size()])
    array = data.numpy()
    if index is not None:
        index[weight_name] = {"dtype": name, "shape": list(array.shape)}
    if array.ndim == 0:
        array = array[None]  # a memory map needs at least one dimension
    target = np.memmap(
        Path(offload_folder) / f"{weight_name}.dat", dtype=array.dtype, mode="w+", shape=array.shape
    )
    target[:] = array[:]
    target.flush()
    del target
    return index


def _stored_dtype(name: str) -> tuple[np.dtype[Any], torch.dtype | None]:
    """The NumPy dtype the bytes were written as, and the torch dtype to view them as (None
    when they are already it)."""
    torch_dtype = getattr(torch, name, None)
    if isinstance(torch_dtype, torch.dtype) and _numpy_name(torch_dtype) is None:
        stand_in = _STAND_INS[torch.empty(0, dtype=torch_dtype).element_size()]
        return np.dtype(str(stand_in).removeprefix("torch.")), torch_dtype
    return np.dtype(name), None


def load_offloaded_weight(weight_file: PathLike, weight_info: Mapping[str, Any]) -> torch.Tensor:
    """The tensor :func:`offload_weight` wrote to ``weight_file`` (``weight_info`` is its index
    entry: ``dtype`` and ``shape``)."""
    shape = tuple(weight_info["shape"])
    stored, view = _stored_dtype(weight_info["dtype"])
    mapped = np.memmap(weight_file, dtype=stored, mode="r", shape=shape or (1,))
    tensor = torch.from_numpy(np.array(mapped if shape else mapped[0]))
    return tensor.view(view) if view is not None else tensor


def save_offload_index(index: Mapping[str, Any] | None, offload_folder: PathLike) -> None:
    """Merge ``index`` into ``offload_folder/index.json`` (created when missing)."""
    if not index:
        return
    path = Path(offload_folder) / INDEX_NAME
    current = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    current.update(index)
    path.write_text(json.dumps(current, indent=2), encoding="utf-8")


def offload_state_dict(save_dir: PathLike, state_dict: Mapping[str, torch.Tensor]) -> None:
    """Write every tensor of ``state_dict`` into ``save_dir`` (created when missing) with its
    index."""
    os.makedirs(save_dir, exist_ok=True)
    index: dict[str, Any] = {}
    for name, tensor in state_dict.items():
        offload_weight(tensor, name, save_dir, index=index)
    save_offload_index(index, save_dir)


def load_offloaded_weights(
    model: nn.Module, index: Mapping[str, Any] | None, offload_folder: PathLike
) -> None:
    """Load the weights listed in ``index`` from ``offload_folder`` into ``model``, on the
    CPU (8-bit weights get their ``SCB`` statistics back)."""
    if not index:
        return
    for name, info in index.items():
        if "SCB" in name:
            continue
        statistics = None
        scb = name.replace("weight", "SCB")
        if "weight" in name and scb in index:
            statistics = load_offloaded_weight(Path(offload_folder) / f"{scb}.dat", index[scb])
        weight = load_offloaded_weight(Path(offload_folder) / f"{name}.dat", info)
        set_module_tensor_to_device(model, name, "cpu", value=weight, fp16_statistics=statistics)


class PrefixedDataset(Mapping[str, Any]):
    """The entries of ``dataset`` whose keys start with ``prefix``, looked up without it:
    ``PrefixedDataset(weights, "decoder.")["weight"]`` is ``weights["decoder.weight"]``."""

    def __init__(self, dataset: Mapping[str, Any], prefix: str) -> None:
        self.dataset = dataset
        self.prefix = prefix

    def __getitem__(self, key: str) -> Any:
        return self.dataset[f"{self.prefix}{key}"]

    def __iter__(self) -> Iterator[str]:
        return iter([key for key in self.dataset if key.startswith(self.prefix)])

    def __len__(self) -> int:
        return sum(1 for key in self.dataset if key.startswith(self.prefix))


class OffloadedWeightsLoader(Mapping[str, torch.Tensor]):
    """Weights by name, from a state dict in memory or from an offload folder on disk (the
    state dict first); a weight on disk is read each time it is asked for.

    Args:
        state_dict: name -> tensor, kept in memory.
        save_folder: a folder written by :func:`offload_state_dict` (or ``offload_weight``
            with ``save_offload_index``).
        index: the folder's index, or entries that point into safetensors files
            (``{"safetensors_file": path, "weight_name": name, "dtype": ...}``); read from
            ``save_folder/index.json`` when not given.
        device: where weights read from safetensors files go (the CPU by default).
    """

    def __init__(
        self,
        state_dict: Mapping[str, torch.Tensor] | None = None,
        save_folder: PathLike | None = None,
        index: Mapping[str, Any] | None = None,
        device: Any = None,
    ) -> None:
        if state_dict is None and save_folder is None and index is None:
            raise ValueError(
                "Need either a `state_dict`, a `save_folder` or an `index` containing offloaded "
                "weights."
            )
        self.state_dict = dict(state_dict or {})
        self.save_folder = save_folder
        if index is None and save_folder is not None:
            index = json.loads((Path(save_folder) / INDEX_NAME).read_text(encoding="utf-8"))
        self.index = dict(index or {})
        self.all_keys = list(self.state_dict)
        self.all_keys += [key for key in self.index if key not in self.state_dict]
        self.device = device

    def __getitem__(self, key: str) -> torch.Tensor:
        if key in self.state_dict:
            return self.state_dict[key]
        info = self.index[key]
        if info.get("safetensors_file") is not None:
            return self._from_safetensors(key, info)
        if self.save_folder is None:
            raise KeyError(f"{key}: its index entry names no file and there is no save_folder.")
        return load_offloaded_weight(Path(self.save_folder) / f"{key}.dat", info)

    def _from_safetensors(self, key: str, info: Mapping[str, Any]) -> torch.Tensor:
        device = "cpu" if self.device is None else self.device
        where = device if isinstance(device, int) else str(device)
        name = info.get("weight_name", key)
        try:
            with safe_open(info["safetensors_file"], framework="pt", device=where) as f:
                tensor = f.get_tensor(name)
        except TypeError:  # a dtype the device cannot hold directly: read on the CPU first
            with safe_open(info["safetensors_file"], framework="pt", device="cpu") as f:
                tensor = f.get_tensor(name)
        if "dtype" in info:
            tensor = tensor.to(getattr(torch, info["dtype"]))
        return tensor.to(device)

    def __iter__(self) -> Iterator[str]:
        return iter(self.all_keys)

    def __len__(self) -> int:
        return len(self.all_keys)
