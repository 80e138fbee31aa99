"""``if accelerator.is_main_process:`` patterns on 2 ranks: each one either works, or fails at
once on every rank with CollectiveMismatchError (it never hangs). Run by
test_main_only_patterns.py in one launch; every rank returns ``{pattern: outcome}``."""

from __future__ import annotations

import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nbaccel import Accelerator
from nbaccel.fsdp import FullyShardedDataParallelPlugin as Plugin
from nbaccel.state import AcceleratorState
from nbaccel.state.handshake import CollectiveMismatchError
from nbaccel.utils import broadcast, broadcast_object_list, merge_fsdp_weights

# Collectives that only the main process calls, before every process calls wait_for_everyone.
REFUSED: dict[str, Callable[[Any, Any, str], Any]] = {
    "gather": lambda acc, model, root: acc.gather(torch.ones(2)),
    "gather_for_metrics": lambda acc, model, root: acc.gather_for_metrics(torch.ones(2)),
    "gather_for_metrics_objects": lambda acc, model, root: acc.gather_for_metrics(
        ["a"], use_gather_object=True
    ),
    "reduce": lambda acc, model, root: acc.reduce(torch.ones(2)),
    "pad_across_processes": lambda acc, model, root: acc.pad_across_processes(torch.ones(2)),
    "broadcast": lambda acc, model, root: broadcast(torch.ones(2)),
    "broadcast_object_list": lambda acc, model, root: broadcast_object_list([1]),
    "save_state": lambda acc, model, root: acc.save_state(str(Path(root) / "refused")),
}
# Under FSDP these gather the shards, so every process must take part.
REFUSED_FSDP: dict[str, Callable[[Any, Any, str], Any]] = {
    "fsdp_get_state_dict": lambda acc, model, root: acc.get_state_dict(model),
    "fsdp_save_model": lambda acc, model, root: acc.save_model(model, str(Path(root) / "m")),
}


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))


def _refused(acc: Any, model: Any, root: str, call: Callable[..., Any]) -> str:
    """Main process alone calls ``call``; then every process waits for the others."""
    try:
        if acc.is_main_process:
            call(acc, model, root)
        acc.wait_for_everyone()
    except CollectiveMismatchError as error:
        return "refused: " + str(error)
    return "finished"


def _ddp_patterns(root: str, out: dict[str, str]) -> None:
    acc = Accelerator(cpu=True)
    model = acc.prepare(_model())
    for name, call in REFUSED.items():
        out[name] = _refused(acc, model, root, call)
    if acc.is_main_process:  # work: no other process is needed
        acc.save_model(model, str(Path(root) / "ddp_model"))
        acc.get_state_dict(model)
        acc.print("printed once")
        acc.save({"a": 1}, str(Path(root) / "saved.pt"))
    acc.wait_for_everyone()
    out["ddp_save_model"] = "finished" if (Path(root) / "ddp_model").is_dir() else "no files"
    with acc.main_process_first():
        out["main_process_first"] = "finished"
    AcceleratorState._reset_state()


def _fsdp_patterns(root: str, out: dict[str, str]) -> None:
    acc = Accelerator(cpu=True, fsdp_plugin=Plugin(state_dict_type="SHARDED_STATE_DICT"))
    model = acc.prepare(_model())
    for name, call in REFUSED_FSDP.items():
        out[name] = _refused(acc, model, root, call)
    checkpoint = acc.save_state(str(Path(root) / "sharded"))
    source = Path(checkpoint) / "pytorch_model_fsdp_0"
    if acc.is_main_process:  # file work only: finishes without the other process
        merge_fsdp_weights(source, Path(root) / "merged_main")
    acc.wait_for_everyone()
    found = (Path(root) / "merged_main" / "model.safetensors").is_file()
    out["merge_on_main"] = "finished" if found else "no file"
    merge_fsdp_weights(source, Path(root) / "merged_all")  # every process: the others wait
    found = (Path(root) / "merged_all" / "model.safetensors").is_file()
    out["merge_everywhere"] = "finished" if found else "no file after return"
    AcceleratorState._reset_state()


def run_patterns(root: str) -> dict[str, str]:
    """Every pattern in order; a failure is recorded and the rest still run."""
    out: dict[str, str] = {}
    for part in (_ddp_patterns, _fsdp_patterns):
        try:
            part(root, out)
        except Exception:
            out[part.__name__] = traceback.format_exc()
    return out


def shared_root() -> str:
    """A folder for the launch's files (made in the parent, shared by the ranks)."""
    return tempfile.mkdtemp(prefix="nbaccel-main-only-")
