"""FSDP models and optimizers in checkpoints: full state dicts gathered on the main process, or
sharded torch.distributed.checkpoint (DCP) directories that every process writes its part of.

One path for FSDP1 and FSDP2: torch.distributed.checkpoint.state_dict's ``get_*``/``set_*``
functions give the same keys (the model's own parameter names) under both versions.

Layout inside a ``save_state`` directory (Accelerate's names):

- FULL_STATE_DICT: ``model.safetensors`` (``pytorch_model.bin`` with
  ``safe_serialization=False``), ``model_1.safetensors``, ...; ``optimizer.bin``,
  ``optimizer_1.bin``, ... (keyed by parameter name); written by the main process.
- SHARDED_STATE_DICT: ``pytorch_model_fsdp_{i}/`` and ``optimizer_{i}/``, each a DCP directory
  (``.metadata`` and one ``__{rank}_0.distcp`` per process) holding ``{"model": ...}`` or
  ``{"optimizer": ...}``. It loads at any number of processes; ``merge_fsdp_weights`` turns
  it into one file.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

from ..checkpoint.files import load_object, load_tensors, save_object, save_tensors
from ..checkpoint.layout import model_file, numbered, read_manifest, verify_manifest
from .safe_dcp import SafeLoadPlanner, SafeReader, is_dcp_dir, unreadable

__all__ = [
    "MODEL_DIR",
    "OPTIMIZER_DIR",
    "full_model_state_dict",
    "full_optimizer_state_dict",
    "is_fsdp_model",
    "load_fsdp_checkpoint",
    "manifest_checker",
    "save_fsdp_checkpoint",
    "uses_sharded_checkpoints",
]

MODEL_DIR = "pytorch_model_fsdp"
OPTIMIZER_DIR = "optimizer"
Pair = tuple[nn.Module, torch.optim.Optimizer]


def is_fsdp_model(model: nn.Module) -> bool:
    """Whether ``model`` holds FSDP1 or FSDP2 modules."""

    return any(isinstance(m, (FSDPModule, FullyShardedDataParallel)) for m in model.modules())


def uses_sharded_checkpoints(plugin: Any) -> bool:
    """Whether the plugin's ``state_dict_type`` asks for sharded checkpoints."""
    name = getattr(plugin.state_dict_type, "name", str(plugin.state_dict_type))
    if name == "LOCAL_STATE_DICT":
        warnings.warn(
            "state_dict_type=LOCAL_STATE_DICT: nbaccel saves such checkpoints as "
            "SHARDED_STATE_DICT (the same one-file-per-process cost, and loadable at any number "
            "of processes).",
            UserWarning,
            stacklevel=3,
        )
    return name != "FULL_STATE_DICT"


def _is_main() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def _options(model: nn.Module, everywhere: bool) -> tuple[StateDictOptions, bool]:
    """Full-state-dict options, and whether this process keeps the result.

    ``cpu_offload`` makes torch gather onto process 0 only; on a CPU device it is left off
    (FSDP1 frees the gathered CPU tensors it would offload) and the other processes drop
    their copy instead.
    """
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    offload = device.type != "cpu" and not everywhere
    keep = everywhere or _is_main()
    return StateDictOptions(full_state_dict=True, cpu_offload=offload), keep


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


def full_model_state_dict(model: nn.Module, everywhere: bool = False) -> dict[str, torch.Tensor]:
    """``model``'s full, unsharded state dict (CPU tensors) on the main process, or on every
    process with ``everywhere``; ``{}`` on the others. Every process must call it."""
    options, keep = _options(model, everywhere)
    state = get_model_state_dict(model, options=options)
    return _to_cpu(state) if keep else {}


def full_optimizer_state_dict(
    model: nn.Module, optimizer: torch.optim.Optimizer, everywhere: bool = False
) -> dict[str, Any]:
    """The optimizer's full state dict, keyed by parameter name, like
    :func:`full_model_state_dict`. Every process must call it."""
    options, keep = _options(model, everywhere)
    state = get_optimizer_state_dict(model, optimizer, options=options)
    return _to_cpu(state) if keep else {}


def _dcp_save(state: dict[str, Any], directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    try:
        dcp.save(state, storage_writer=FileSystemWriter(directory, sync_files=True))
    except dcp.CheckpointException as error:  # a BaseException: made an ordinary error
        failures = list((getattr(error, "failures", None) or {}).values())
        cause = next((f for f in failures if isinstance(f, OSError)), None)
        if cause is not None and cause.errno is not None:
            raise OSError(
                cause.errno, f"Could not write the sharded checkpoint {directory}: {cause.strerror}"
            ) from error
        detail = "; ".join(f"{type(f).__name__}: {f}" for f in failures) or str(error)
        raise RuntimeError(
            f"Could not write the sharded checkpoint {directory}: {detail}"
        ) from error


def _dcp_load(state: dict[str, Any], where: Path, reader: SafeReader, partial: bool) -> None:
    try:
        dcp.load(state, storage_reader=reader, planner=_planner(allow_partial_load=partial))
    except dcp.CheckpointException as error:
        raise unreadable(where, error) from error


def save_fsdp_checkpoint(
    directory: Path,
    models: Sequence[nn.Module],
    weights: Sequence[dict[str, torch.Tensor]],
    pairs: Sequence[Pair],
    *,
    sharded: bool,
    writer: bool,
    safe_serialization: bool,
    everywhere: bool = False,
) -> None:
    """Write models and optimizers into ``directory``; every process calls it.

    Sharded: each model's and optimizer's DCP directory. Full: ``weights`` (full state dicts,
    which the writer holds) and the optimizers' full state dicts, written by ``writer``.
    """
    if sharded:
        for index, model in enumerate(models):
            _dcp_save({"model": get_model_state_dict(model)}, directory / f"{MODEL_DIR}_{index}")
        for index, (model, optimizer) in enumerate(pairs):
            optimizer_state = {"optimizer": get_optimizer_state_dict(model, optimizer)}
            _dcp_save(optimizer_state, directory / f"{OPTIMIZER_DIR}_{index}")
        return
    optimizer_states = [full_optimizer_state_dict(m, o, everywhere) for m, o in pairs]
    if not writer:
        return
    for index, state_dict in enumerate(weights):
        path = directory / model_file(index, safe_serialization)
        if safe_serialization:
            save_tensors(state_dict, path)
        else:
            save_object(state_dict, path)
    for index, state in enumerate(optimizer_states):
        save_object(state, directory / numbered(OPTIMIZER_DIR, index, "bin"))


def _nothing_for(directory: Path, what: str, sharded: str, full: str) -> FileNotFoundError:
    return FileNotFoundError(
        f"The checkpoint {directory} holds nothing for {what}: expected {sharded} (a sharded "
        f"checkpoint, SHARDED_STATE_DICT) or {full} (FULL_STATE_DICT). Was it written by "
        "save_state() with the same models and optimizers?"
    )


def _misfit(where: Path, index: int, model: nn.Module, error: Any) -> RuntimeError:
    return RuntimeError(
        f"The weights in {where} do not fit model {index} ({type(model).__name__}): {error}"
    )


def _planner(allow_partial_load: bool = False) -> SafeLoadPlanner:
    # Not flattening FSDP1's ShardedTensors keeps those this process holds no shard of (a
    # small parameter at many processes) in the plan; dropped, torch takes the checkpoint
    # for its pre-2.4 key format and reports ``optimizer.param_groups`` as missing.
    return SafeLoadPlanner(flatten_sharded_tensors=False, allow_partial_load=allow_partial_load)


def _load_sharded_model(where: Path, model: nn.Module, index: int, strict: bool) -> None:
    reader = SafeReader(where)
    metadata = reader.read_metadata()
    saved = {
        path[1]
        for path in (metadata.planner_data or {}).values()
        if len(path) == 2 and path[0] == "model"
    }
    template = get_model_state_dict(model)
    missing = sorted(set(template) - saved)
    unexpected = sorted(saved - set(template))
    if strict and (missing or unexpected):
        raise _misfit(
            where, index, model, f"missing keys {missing[:10]}, unexpected {unexpected[:10]}"
        )
    for key in missing:
        del template[key]
    state = {"model": template}
    _dcp_load(state, where, reader, partial=True)
    set_model_state_dict(model, state["model"], options=StateDictOptions(strict=False))


def _load_full_model(
    directory: Path, model: nn.Module, index: int, strict: bool, checked: Callable[[str], Path]
) -> None:
    safe, unsafe = model_file(index, True), model_file(index, False)
    if (directory / safe).exists():
        path = checked(safe)
        state: dict[str, Any] = dict(load_tensors(path))
    elif (directory / unsafe).exists():
        path = checked(unsafe)
        state = load_object(path)
    else:
        raise _nothing_for(
            directory, f"model {index}", f"{MODEL_DIR}_{index}/", f"{safe} or {unsafe}"
        )
    options = StateDictOptions(full_state_dict=True, strict=strict)
    try:
        set_model_state_dict(model, state, options=options)
    except (RuntimeError, KeyError, ValueError) as error:
        raise _misfit(path, index, model, error) from error


def _load_full_optimizer(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    state = load_object(path)
    if any(isinstance(key, int) for key in state.get("state", {})):
        raise ValueError(
            f"{path} holds an optimizer saved without FSDP (its state is keyed by position); "
            "an FSDP optimizer loads state keyed by parameter name, as FSDP's save_state "
            "writes it. Load it into the model and optimizer as they were trained."
        )
    options = StateDictOptions(full_state_dict=True)
    set_optimizer_state_dict(model, optimizer, state, options=options)


def _load_sharded_optimizer(
    where: Path, model: nn.Module, optimizer: torch.optim.Optimizer
) -> None:
    reader = SafeReader(where)
    state = {"optimizer": get_optimizer_state_dict(model, optimizer)}
    _dcp_load(state, where, reader, partial=False)
    set_optimizer_state_dict(model, optimizer, state["optimizer"])


def _sharded_dir(directory: Path, name: str, checked: Callable[[str], Path]) -> Path | None:
    """The DCP directory ``name`` when the checkpoint has one (its files checked)."""
    where = directory / name
    if not where.is_dir():
        return None
    checked(name)  # the manifest's entries under it
    if not is_dcp_dir(where):
        raise FileNotFoundError(
            f"The sharded checkpoint directory {where} has no .metadata file: it is not a "
            "complete torch.distributed.checkpoint directory. Load an earlier checkpoint."
        )
    return where


def load_fsdp_checkpoint(
    directory: Path,
    models: Sequence[nn.Module],
    pairs: Sequence[Pair],
    *,
    strict: bool,
    checked: Callable[[str], Path],
) -> None:
    """Load what :func:`save_fsdp_checkpoint` wrote (sharded or full, as found on disk) into
    ``models`` and the optimizers of ``pairs``; every process calls it. ``checked(name)``
    verifies a file (or every file under a directory) against the manifest."""
    for index, model in enumerate(models):
        where = _sharded_dir(directory, f"{MODEL_DIR}_{index}", checked)
        if where is not None:
            _load_sharded_model(where, model, index, strict)
        else:
            _load_full_model(directory, model, index, strict, checked)
    for index, (model, optimizer) in enumerate(pairs):
        where = _sharded_dir(directory, f"{OPTIMIZER_DIR}_{index}", checked)
        if where is not None:
            _load_sharded_optimizer(where, model, optimizer)
        else:
            name = numbered(OPTIMIZER_DIR, index, "bin")
            if not (directory / name).exists():
                raise _nothing_for(
                    directory, f"optimizer {index}", f"{OPTIMIZER_DIR}_{index}/", name
                )
            _load_full_optimizer(checked(name), model, optimizer)


def manifest_checker(directory: Path) -> Callable[[str], Path]:
    """``checked(name)``: ``directory / name`` after checking it, or every file under it,
    against the checkpoint's manifest (present, with the size that was written)."""
    manifest = read_manifest(directory)

    def checked(name: str) -> Path:
        if manifest is not None:
            listed = manifest.get("files", {})
            names = [n for n in listed if n == name or n.startswith(f"{name}/")]
            verify_manifest(directory, manifest, names)
        return directory / name

    return checked
