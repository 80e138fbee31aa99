"""The files of a training-state checkpoint: writing them into a directory and loading them.

Layout (Accelerate's names where the format is Accelerate's): ``model.safetensors`` (or
``pytorch_model.bin``), ``model_1...``; ``optimizer.safetensors`` (see :mod:`.optimizer_files`;
``optimizer.bin`` with ``safe_serialization=False``, for states the format cannot hold, and in
checkpoints of earlier versions); ``scheduler.bin``; ``dl_state_dict.bin``; ``scaler.pt``;
``custom_checkpoint_{i}.pkl``; one ``random_states_{rank}.pkl`` per process; and
``checkpoint.json``. Every ``.bin``/``.pt``/``.pkl`` file is a ``torch.save`` file holding only
tensors and plain values, read with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .files import load_object, load_tensors_into, save_object, tensor_file
from .layout import model_file, numbered, read_manifest, verify_manifest
from .optimizer_files import load_optimizer_state, optimizer_file
from .rng import capture_rng, restore_rng
from .tensorfile import tensor_files_written

__all__ = ["StateObjects", "load_state_files", "save_state_files", "state_file_names"]


@dataclasses.dataclass
class StateObjects:
    """What a checkpoint holds, in order (``weights`` on save, ``models`` on load)."""

    models: list[nn.Module]
    optimizers: list[Any]
    schedulers: list[Any]
    dataloaders: list[Any]
    custom: list[Any]
    scaler: Any = None
    weights: list[dict[str, torch.Tensor]] = dataclasses.field(default_factory=list)


def _names(kind: str, count: int) -> list[str]:
    if kind == "custom_checkpoint":  # Accelerate numbers every registered object
        return [f"custom_checkpoint_{i}.pkl" for i in range(count)]
    return [numbered(kind, i, "bin") for i in range(count)]


def state_file_names(objects: StateObjects, safe_serialization: bool) -> list[str]:
    """The files the writing process puts in a checkpoint for ``objects``."""
    names = [model_file(i, safe_serialization) for i in range(len(objects.weights))]
    extension = "safetensors" if safe_serialization else "bin"  # (or .bin: see optimizer_file)
    names += [numbered("optimizer", i, extension) for i in range(len(objects.optimizers))]
    names += _names("scheduler", len(objects.schedulers))
    names += _names("dl_state_dict", len(objects.dataloaders))
    names += _names("custom_checkpoint", len(objects.custom))
    if objects.scaler is not None:
        names.append("scaler.pt")
    return names


def _tensor_files(
    directory: Path, objects: StateObjects, safe_serialization: bool
) -> tuple[list[Any], list[tuple[Any, Path]]]:
    """The safetensors files to write (weights and optimizer states), and the objects left
    for ``torch.save`` (everything with ``safe_serialization=False``)."""
    files: list[Any] = []
    pickled: list[tuple[Any, Path]] = []
    for i, weights in enumerate(objects.weights):
        if safe_serialization:
            files.append(tensor_file(weights, directory / model_file(i, True)))
        else:
            pickled.append((weights, directory / model_file(i, False)))
    for i, optimizer in enumerate(objects.optimizers):
        state = optimizer.state_dict()
        path = directory / numbered("optimizer", i, "safetensors")
        prepared = optimizer_file(state, path) if safe_serialization else None
        if prepared is not None:
            files.append(prepared)
        else:  # Accelerate's format: torch.save
            pickled.append((state, directory / numbered("optimizer", i, "bin")))
    return files, pickled


def save_state_files(
    directory: Path,
    objects: StateObjects,
    *,
    process_index: int,
    writer: bool,
    safe_serialization: bool,
    counters: dict[str, int],
) -> None:
    """Write this process's part of a checkpoint into ``directory``.

    The writing process (``writer``) saves the shared state: weights, optimizers,
    schedulers, loader positions, scaler and registered objects. Every process saves its own
    random number generator states and ``counters`` (``random_states_{rank}.pkl``).
    """
    if writer:
        # weights and optimizer states are written by a few threads in the background (see
        # transfer.py) while this thread torch.saves the small objects
        files, pickled = _tensor_files(directory, objects, safe_serialization)
        with tensor_files_written(files) if files else contextlib.nullcontext():
            for obj, path in pickled:
                save_object(obj, path)
            groups = (
                ("scheduler", objects.schedulers),
                ("dl_state_dict", objects.dataloaders),
                ("custom_checkpoint", objects.custom),
            )
            for kind, items in groups:
                _save_states(directory, kind, items)
            if objects.scaler is not None:
                save_object(objects.scaler.state_dict(), directory / "scaler.pt")
    save_object(
        {"rng": capture_rng(), **counters}, directory / f"random_states_{process_index}.pkl"
    )


def _save_states(directory: Path, kind: str, items: list[Any]) -> None:
    for name, item in zip(_names(kind, len(items)), items, strict=True):
        save_object(item.state_dict(), directory / name)


def save_loader_states(directory: Path, dataloaders: list[Any]) -> None:
    """Write the data loaders' positions (``dl_state_dict*.bin``) into ``directory``: for a
    machine that does not share the writing process's file system."""
    _save_states(directory, "dl_state_dict", dataloaders)


class _Checked:
    """Paths of a checkpoint's files, each checked against the manifest when it is read."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.manifest = read_manifest(directory)

    def __call__(self, name: str) -> Path:
        if self.manifest is not None:
            verify_manifest(self.directory, self.manifest, [name])
        return self.directory / name


def _load_model(model: nn.Module, files: _Checked, index: int, strict: bool) -> None:
    path = files(model_file(index, True))
    expected = model.state_dict()
    if not path.exists() and (files.directory / model_file(index, False)).exists():
        path = files(model_file(index, False))
        done: set[str] = set()
        weights = load_object(path)
    else:  # read straight into the parameters' memory
        done, weights = load_tensors_into(path, expected)
    try:
        result = model.load_state_dict(weights, strict=False)
        missing = sorted(set(result.missing_keys) - done)
        if strict and (missing or result.unexpected_keys):
            raise RuntimeError(
                f"missing keys {missing[:10]}, unexpected keys {result.unexpected_keys[:10]}"
            )
    except RuntimeError as error:
        raise RuntimeError(
            f"The weights in {path} do not fit model {index} ({type(model).__name__}): {error}"
        ) from error


def _load_optimizer(optimizer: Any, files: _Checked, index: int) -> None:
    """From ``optimizer.safetensors`` (read into the current state where it fits), else from
    ``optimizer.bin`` (``safe_serialization=False``, or a checkpoint of an earlier version)."""
    safe, pickled = (numbered("optimizer", index, kind) for kind in ("safetensors", "bin"))
    if files.manifest is not None:
        old_format = pickled in files.manifest.get("files", {})
    else:
        old_format = not (files.directory / safe).exists()
    if old_format:
        state = load_object(files(pickled))
    else:
        state = load_optimizer_state(files(safe), optimizer.state_dict())
    optimizer.load_state_dict(state)


def _load_loader(loader: Any, files: _Checked, name: str) -> None:
    """Restore epoch and seed; the position in the epoch too when the loader is stateful.

    The file holds nbaccel's ``{"epoch", "batches_yielded", "seed"}``, or with
    ``use_stateful_dataloader=True`` torchdata's state (Accelerate's ``dl_state_dict.bin``),
    with ``epoch`` and ``seed`` where the order depends on them. A checkpoint without the
    file (Accelerate writes it for stateful loaders only) leaves the loader as it is.
    """
    listed = files.manifest is not None and name in files.manifest.get("files", {})
    if not listed and not (files.directory / name).exists():
        return
    state = load_object(files(name))
    if getattr(loader, "use_stateful_dataloader", False):
        loader.load_state_dict(state)
    elif "epoch" in state and "seed" in state:
        # the documented recipe skips the batches already done with skip_first_batches
        loader.load_state_dict(
            {"epoch": state["epoch"], "seed": state["seed"], "batches_yielded": 0}
        )


def _check_custom_count(directory: Path, count: int) -> None:
    found = sorted(p.name for p in directory.glob("custom_checkpoint_*.pkl"))
    if len(found) != count:
        raise RuntimeError(
            f"The checkpoint {directory} holds {len(found)} registered object(s) ({found}), but "
            f"{count} are registered with register_for_checkpointing now. Register the same "
            "objects, in the same order, as when the checkpoint was saved."
        )


def load_state_files(
    directory: Path,
    objects: StateObjects,
    *,
    process_index: int,
    num_processes: int,
    strict: bool = True,
) -> dict[str, int]:
    """Load a checkpoint written by :func:`save_state_files` into ``objects``.

    Returns:
        The counters this process saved (``step``, ...), or {} when the checkpoint was saved
        by fewer processes and holds no random states for this one.
    """
    if not directory.is_dir():
        raise FileNotFoundError(f"The checkpoint directory {directory} does not exist.")
    files = _Checked(directory)
    if files.manifest is not None:  # a missing registered-object file is named as such
        listed = files.manifest.get("files", {})
        custom = sorted(name for name in listed if name.startswith("custom_checkpoint_"))
        verify_manifest(directory, files.manifest, custom)
    _check_custom_count(directory, len(objects.custom))
    for i, model in enumerate(objects.models):
        _load_model(model, files, i, strict)
    for i, optimizer in enumerate(objects.optimizers):
        _load_optimizer(optimizer, files, i)
    for name, scheduler in zip(
        _names("scheduler", len(objects.schedulers)), objects.schedulers, strict=True
    ):
        scheduler.load_state_dict(load_object(files(name)))
    for name, loader in zip(
        _names("dl_state_dict", len(objects.dataloaders)), objects.dataloaders, strict=True
    ):
        _load_loader(loader, files, name)
    for name, obj in zip(
        _names("custom_checkpoint", len(objects.custom)), objects.custom, strict=True
    ):
        obj.load_state_dict(load_object(files(name)))
    if objects.scaler is not None:
        objects.scaler.load_state_dict(load_object(files("scaler.pt")))
    rng_name = f"random_states_{process_index}.pkl"
    saved_processes = (files.manifest or {}).get("num_processes", num_processes)
    if not (directory / rng_name).exists() and process_index >= saved_processes:
        return {}  # saved by fewer processes: this one keeps its own generators
    states = load_object(files(rng_name))
    restore_rng(states.pop("rng"))
    return {k: int(v) for k, v in states.items()}
