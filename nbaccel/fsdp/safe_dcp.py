"""Reading torch.distributed.checkpoint (DCP) directories without running code from them.

DCP unpickles a checkpoint's ``.metadata`` with plain ``pickle`` and its non-tensor entries
(optimizer hyperparameters, ...) with ``torch.load(weights_only=False)``: a crafted directory
could run code on load. nbaccel's checkpoints promise that loading never does, so the reader
here unpickles the metadata with an allow-list of DCP's own metadata classes, and the planner
loads every non-tensor entry only after ``torch.load(weights_only=True)`` accepted it.
"""

from __future__ import annotations

import io
import itertools
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta, TensorStorageMetadata

__all__ = [
    "METADATA_NAME",
    "SafeLoadPlanner",
    "SafeReader",
    "is_dcp_dir",
    "load_all",
    "unreadable",
]

METADATA_NAME = ".metadata"
_METADATA_MODULE = "torch.distributed.checkpoint.metadata"  # dataclasses and enums only
_ALLOWED = {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch.serialization", "_get_layout"),
    ("collections", "OrderedDict"),
    ("pathlib", "Path"),
    ("pathlib", "PosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "PureWindowsPath"),
}
_TORCH_VALUES = (torch.dtype, torch.layout, torch.memory_format)


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP metadata: its dataclasses and enums, torch dtypes and sizes, paths."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if module == _METADATA_MODULE:
            found = super().find_class(module, name)
            if isinstance(found, type) and found.__module__ == module:  # not its imports
                return found
        elif module == "torch" and (
            name == "Size" or isinstance(getattr(torch, name, None), _TORCH_VALUES)
        ):
            return getattr(torch, name)
        raise pickle.UnpicklingError(
            f"the checkpoint metadata refers to {module}.{name}, which is not part of a "
            "torch.distributed.checkpoint metadata file"
        )


def _read_metadata(path: Path) -> Metadata:
    try:
        with open(path, "rb") as handle:
            metadata = _MetadataUnpickler(handle).load()
    except FileNotFoundError:
        raise
    except Exception as error:
        raise ValueError(
            f"Refusing to read {path}: it is corrupt or not torch.distributed.checkpoint "
            f"metadata, and nbaccel does not unpickle anything else ({error})."
        ) from error
    if not isinstance(metadata, Metadata):
        raise ValueError(f"{path} does not hold torch.distributed.checkpoint metadata.")
    return metadata


class SafeReader(FileSystemReader):
    """A ``FileSystemReader`` whose metadata is unpickled with an allow-list."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")
        name = METADATA_NAME if rank is None else f"__{rank}{METADATA_NAME}"
        metadata = _read_metadata(Path(os.fspath(self.path)) / name)
        storage_meta = getattr(metadata, "storage_meta", None) or StorageMeta()
        storage_meta.load_id = self.load_id
        metadata.storage_meta = storage_meta
        return metadata


class SafeLoadPlanner(DefaultLoadPlanner):
    """``DefaultLoadPlanner`` that lets only tensors and plain values out of byte entries."""

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        where = read_item.dest_index.fqn
        try:
            torch.load(value, weights_only=True)
        except Exception as error:
            raise ValueError(
                f"Refusing to load the entry {where!r} of a sharded checkpoint: it holds "
                "objects other than tensors and plain Python values, and loading them could "
                f"run code ({str(error).strip().splitlines()[0][:200]})."
            ) from error
        value.seek(0)  # accepted: the unrestricted load can only rebuild the same plain values
        super().load_bytes(read_item, value)


def unreadable(directory: Path, error: BaseException) -> ValueError:
    """A ValueError naming ``directory`` and what each process ran into, for DCP's
    ``CheckpointException`` (a BaseException, which ``except Exception`` lets through)."""
    failures = getattr(error, "failures", None) or {}
    causes = "; ".join(
        f"{type(cause).__name__}: {str(cause).strip()[:200]}" for cause in failures.values()
    )
    return ValueError(
        f"The sharded checkpoint {directory} cannot be read ({causes or error}); it is "
        "damaged or incomplete. Load an earlier checkpoint."
    )


def is_dcp_dir(path: Path) -> bool:
    """Whether ``path`` is a directory holding a DCP checkpoint (it has ``.metadata``)."""
    return (path / METADATA_NAME).is_file()


def _set(nested: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    """``nested[path[0]][path[1]]... = value``; integer steps build lists (param_groups)."""
    node: Any = nested
    for step, following in itertools.pairwise(path):
        empty: Any = [] if isinstance(following, int) else {}
        if isinstance(node, list):
            while len(node) <= step:
                node.append(None)
            if node[step] is None:
                node[step] = empty
        else:
            node.setdefault(step, empty)
        node = node[step]
    if isinstance(node, list):
        while len(node) <= path[-1]:
            node.append(None)
    node[path[-1]] = value


def load_all(directory: Path) -> dict[str, Any]:
    """Every entry of the DCP checkpoint in ``directory``, as full tensors and plain values,
    nested as it was saved. Runs in this process alone (no process group needed)."""
    reader = SafeReader(directory)
    metadata = reader.read_metadata()
    flat: dict[str, Any] = {}
    for key, info in metadata.state_dict_metadata.items():
        if isinstance(info, TensorStorageMetadata):
            flat[key] = torch.empty(info.size, dtype=info.properties.dtype)
        else:
            flat[key] = None  # a byte entry: DCP puts the loaded value in its place
    # (nothing flattened: the planner then fills this very dict, byte entries included)
    with warnings.catch_warnings():  # "torch.distributed is disabled ...": that is the intent
        warnings.simplefilter("ignore", UserWarning)
        try:
            dcp.load(
                flat,
                storage_reader=reader,
                planner=SafeLoadPlanner(flatten_state_dict=False, flatten_sharded_tensors=False),
                no_dist=True,
            )
        except dcp.CheckpointException as error:  # a BaseException: made an ordinary error
            raise unreadable(directory, error) from error
    nested: dict[str, Any] = {}
    mapping = metadata.planner_data or {}
    for key, value in flat.items():
        _set(nested, tuple(mapping.get(key, (key,))), value)
    return nested
