"""``merge_fsdp_weights``: a sharded FSDP checkpoint directory merged into one file that a
plain (unwrapped) model or optimizer loads, without a process group."""

from __future__ import annotations

import os
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ..checkpoint.files import save_object, save_tensors
from ..checkpoint.layout import MANIFEST_NAME, make_dirs, read_manifest, verify_manifest
from ..validation import check_bool, check_path
from .safe_dcp import is_dcp_dir, load_all
from .shards import require_every_shard

__all__ = ["merge_checkpoint", "merge_fsdp_weights", "merged_file_name"]

_MODEL_NAMES = ("model.safetensors", "pytorch_model.bin")
_WAIT = timedelta(minutes=30)


def merged_file_name(state: dict[str, Any], safe_serialization: bool) -> str:
    """``model.safetensors`` / ``pytorch_model.bin`` for weights; ``optimizer.bin`` for an
    optimizer (its state is nested and holds hyperparameters, which safetensors cannot)."""
    if _is_optimizer(state):
        return "optimizer.bin"
    return _MODEL_NAMES[0] if safe_serialization else _MODEL_NAMES[1]


def _is_optimizer(state: dict[str, Any]) -> bool:
    return isinstance(state.get("state"), dict) and isinstance(state.get("param_groups"), list)


def _not_a_checkpoint(directory: Path) -> ValueError:
    inside = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
    candidates = [name for name in inside if is_dcp_dir(directory / name)]
    hint = (
        f"It holds the sharded checkpoint directories {', '.join(candidates)}: pass one of "
        f"them, e.g. {directory / candidates[0]}."
        if candidates
        else (
            f"It holds {', '.join(n for n in inside if n in _MODEL_NAMES)}: those weights are "
            "already in one file (a FULL_STATE_DICT checkpoint), nothing to merge."
            if any(n in _MODEL_NAMES for n in inside)
            else f"It holds: {', '.join(inside[:10]) or 'nothing'}."
        )
    )
    return ValueError(
        f"merge_fsdp_weights: {directory} is not a sharded FSDP checkpoint: it has no .metadata "
        "file. Expected a torch.distributed.checkpoint directory that save_state() writes "
        "with state_dict_type='SHARDED_STATE_DICT', such as "
        f"<checkpoint>/pytorch_model_fsdp_0 (model) or <checkpoint>/optimizer_0. {hint}"
    )


def _check(checkpoint_dir: Path, output_path: Path, remove_checkpoint_dir: bool) -> None:
    if not checkpoint_dir.exists():
        raise FileNotFoundError(f"merge_fsdp_weights: {checkpoint_dir} does not exist.")
    if not is_dcp_dir(checkpoint_dir):
        raise _not_a_checkpoint(checkpoint_dir)
    if output_path.exists() and not output_path.is_dir():
        raise FileExistsError(
            f"merge_fsdp_weights: the output path {output_path} is a file; it must be a "
            "directory (made if missing) to write model.safetensors / pytorch_model.bin into."
        )
    inside = output_path.resolve().is_relative_to(checkpoint_dir.resolve())
    if remove_checkpoint_dir and inside:
        raise ValueError(
            f"merge_fsdp_weights: the output path {output_path} is inside {checkpoint_dir}, "
            "which remove_checkpoint_dir=True would delete with the merged file; write it "
            "somewhere else."
        )


def _verify_sizes(checkpoint_dir: Path) -> None:
    """Inside a ``save_state`` checkpoint, check the directory's files against its manifest
    (a truncated shard is then named, with the size that was written)."""
    parent = checkpoint_dir.resolve().parent
    manifest = read_manifest(parent) if (parent / MANIFEST_NAME).is_file() else None
    if manifest is not None:
        prefix = f"{checkpoint_dir.resolve().name}/"
        names = [name for name in manifest.get("files", {}) if name.startswith(prefix)]
        verify_manifest(parent, manifest, names)


def _merge(checkpoint_dir: Path, output_path: Path, safe: bool, remove: bool) -> Path:
    require_every_shard(checkpoint_dir)
    _verify_sizes(checkpoint_dir)
    state = load_all(checkpoint_dir)
    if len(state) == 1:  # save_state nests the entries under "model" or "optimizer"
        state = next(iter(state.values()))
    name = merged_file_name(state, safe)
    make_dirs(output_path)
    target = output_path / name
    if name in _MODEL_NAMES:
        tensors = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
        if len(tensors) != len(state):
            odd = sorted(k for k in state if k not in tensors)[:5]
            raise ValueError(
                f"merge_fsdp_weights: {checkpoint_dir} holds entries that are not tensors "
                f"({odd}); it is not a model's weights."
            )
        (save_tensors if safe else save_object)(tensors, target)
    else:
        save_object(state, target)
    if remove:
        shutil.rmtree(checkpoint_dir)
    return target


def merge_checkpoint(
    checkpoint_dir: str | os.PathLike[str],
    output_path: str | os.PathLike[str],
    safe_serialization: bool = True,
    remove_checkpoint_dir: bool = False,
) -> Path:
    """:func:`merge_fsdp_weights` in this process alone; returns the file it wrote."""
    source, output = Path(checkpoint_dir).expanduser(), Path(output_path).expanduser()
    _check(source, output, remove_checkpoint_dir)
    return _merge(source, output, safe_serialization, remove_checkpoint_dir)


def merge_fsdp_weights(
    checkpoint_dir: str | os.PathLike[str],
    output_path: str | os.PathLike[str],
    safe_serialization: bool = True,
    remove_checkpoint_dir: bool = False,
) -> None:
    """Merge a sharded FSDP checkpoint into one file in ``output_path``.

    Args:
        checkpoint_dir: a torch.distributed.checkpoint directory written by ``save_state`` with
            ``state_dict_type="SHARDED_STATE_DICT"``: ``<checkpoint>/pytorch_model_fsdp_0``
            (a model) or ``<checkpoint>/optimizer_0`` (an optimizer).
        output_path: directory (made if missing) for ``model.safetensors`` (a model,
            ``safe_serialization=True``), ``pytorch_model.bin`` (a model, ``False``) or
            ``optimizer.bin`` (an optimizer: nested state and hyperparameters, always a
            ``torch.save`` file that ``torch.load(weights_only=True)`` reads).
        safe_serialization: safetensors (True) or ``torch.save`` (False) for weights.
        remove_checkpoint_dir: delete ``checkpoint_dir`` once the merged file is written.

    Needs no process group and runs no collective: in a launched function only the main
    process merges, so ``if accelerator.is_main_process: merge_fsdp_weights(...)`` followed by
    ``accelerator.wait_for_everyone()`` works. Called on every process, the others wait for the
    main process's merge (through the job's key-value store, up to 30 minutes) and raise if it
    failed. Keys are the model's own parameter names: the file loads into the plain model with
    ``load_state_dict(..., strict=True)``.
    """
    check_path("merge_fsdp_weights(checkpoint_dir)", checkpoint_dir, allow_none=False)
    check_path("merge_fsdp_weights(output_path)", output_path, allow_none=False)
    check_bool("merge_fsdp_weights(safe_serialization)", safe_serialization)
    check_bool("merge_fsdp_weights(remove_checkpoint_dir)", remove_checkpoint_dir)
    arguments = (checkpoint_dir, output_path, safe_serialization, remove_checkpoint_dir)
    group = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    if not group:
        merge_checkpoint(*arguments)
        return
    store = _store()
    key = f"nbaccel/merge_fsdp_weights/{Path(output_path).expanduser().resolve()}"
    if dist.get_rank() != 0:
        if store is not None:
            _wait_for_main(store, key)
        return
    status = "ok"
    try:
        merge_checkpoint(*arguments)
    except BaseException as error:  # processes that wait raise too, instead of waiting on
        status = f"{type(error).__name__}: {error}"
        raise
    finally:
        if store is not None:  # the count of merges into this output: the k-th call's result
            store.set(f"{key}/{store.add(key, 1)}", status)


def _store() -> Any:
    """The job's key-value store (torch's default store), or None where there is none."""
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:
        return None


def _wait_for_main(store: Any, key: str) -> None:
    """Wait for the main process's merge matching this process's k-th call for the output."""
    mine = store.add(f"{key}/rank{dist.get_rank()}", 1)
    try:
        store.wait([f"{key}/{mine}"], _WAIT)
    except RuntimeError:
        raise TimeoutError(
            f"merge_fsdp_weights on process {dist.get_rank()} waited {_WAIT} for the main "
            "process to merge into the same output_path, and it did not. Only the main process "
            "merges: call it there (`if accelerator.is_main_process:`), or on every process."
        ) from None
    status = store.get(f"{key}/{mine}").decode()
    if status != "ok":
        raise RuntimeError(f"merge_fsdp_weights failed on the main process: {status}")
