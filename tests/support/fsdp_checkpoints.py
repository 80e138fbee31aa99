"""Rank-side code for the FSDP checkpoint tests: two launches per world size share a directory.

``save_phase`` trains FSDP1 and FSDP2 models, saves sharded and full checkpoints and exports
the weights; ``resume_phase`` (a fresh launch: a restart) loads the sharded checkpoints and
continues. Each returns ``{"checks": {name: "ok" or traceback}, ...tensors on rank 0}``.
The multinode tier's machines train and save with ``build``, ``train_step`` and ``batches``.
"""

from __future__ import annotations

import copy
import shutil
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

from nbaccel import Accelerator, AcceleratorState, PartialState
from nbaccel.fsdp import FullyShardedDataParallelPlugin as Plugin
from nbaccel.utils import merge_fsdp_weights
from tests.support.fsdp import Net, full_state, raises

STEPS, SAVE_AT = 4, 2
VERSIONS = (1, 2)
LR = 0.01
SAVE_CHECKS = ("sharded_save", "full_round_trip", "get_state_dict")
RESUME_CHECKS = ("resume", "other_version")
CHECK_NAMES = [f"{name}_v{v}" for v in VERSIONS for name in SAVE_CHECKS + RESUME_CHECKS]
CHECK_NAMES += ["damaged_shard_named", "merge_in_launch"]


def plugin(version: int, kind: str) -> Plugin:
    return Plugin(
        fsdp_version=version,
        state_dict_type=kind,
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["Block"],
    )


def build(version: int, kind: str = "SHARDED_STATE_DICT") -> tuple[Accelerator, nn.Module, Any]:
    acc = Accelerator(fsdp_plugin=plugin(version, kind))
    raw = Net()
    optimizer = torch.optim.AdamW(raw.parameters(), lr=LR)  # created before prepare
    model, optimizer = acc.prepare(raw, optimizer)
    return acc, model, optimizer


def train_step(acc: Accelerator, model: nn.Module, optimizer: Any, batch: Any) -> None:
    x, y = batch
    rank, world = acc.process_index, acc.num_processes
    acc.backward(nn.functional.mse_loss(model(x[rank::world]), y[rank::world]))
    optimizer.step()
    optimizer.zero_grad()


def batches(steps: int, world: int | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The same batches on every process (each trains on its slice of 4 rows)."""
    world = world or PartialState().num_processes
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(4 * world, 8, generator=g), torch.randn(4 * world, 1, generator=g))
        for _ in range(steps)
    ]


def reference(steps: int, world: int) -> dict[str, torch.Tensor]:
    """One process, whole batches, the same AdamW: what the sharded runs reproduce."""
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    for x, y in batches(steps, world):
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    return {k: v.detach() for k, v in model.state_dict().items()}


def full_optimizer(model: nn.Module, optimizer: Any) -> dict[str, Any]:
    inner = getattr(optimizer, "optimizer", optimizer)
    options = StateDictOptions(full_state_dict=True)
    state = get_optimizer_state_dict(model, inner, options=options)
    return copy.deepcopy(state)  # the optimizer's own tensors (step) change in place


def same(a: Any, b: Any, where: str = "") -> None:
    """Nested equality; tensors bitwise."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), f"{where} differs"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{where}: keys {set(a) ^ set(b)}"
        for key in a:
            same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: lengths"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def run(checks: list[Callable[[], None]]) -> dict[str, str]:
    results = {}
    warnings.simplefilter("ignore")
    for function in checks:
        try:
            function()
            results[function.__name__] = "ok"
        except BaseException:
            results[function.__name__] = traceback.format_exc()
        AcceleratorState._reset_state()
    return results


def save_phase(root: str) -> dict[str, Any]:
    """Sharded saves mid-run (runs go on to the end), full round trips, the guide's switch."""
    out: dict[str, Any] = {}

    def sharded(version: int) -> None:
        acc, model, optimizer = build(version)
        target = Path(root) / f"sharded_v{version}"
        for i, batch in enumerate(batches(STEPS)):
            if i == SAVE_AT:
                acc.save_state(target)
                out[f"saved_v{version}"] = full_state(model)
                out[f"saved_optim_v{version}"] = full_optimizer(model, optimizer)
            train_step(acc, model, optimizer, batch)
        out[f"final_v{version}"] = full_state(model)
        names = sorted(p.name for p in target.iterdir())
        world = acc.num_processes
        assert names == sorted(
            ["checkpoint.json", "optimizer_0", "pytorch_model_fsdp_0"]
            + [f"random_states_{r}.pkl" for r in range(world)]
        ), names
        for sub in ("pytorch_model_fsdp_0", "optimizer_0"):
            files = sorted(p.name for p in (target / sub).iterdir())
            assert files == sorted([".metadata"] + [f"__{r}_0.distcp" for r in range(world)])
        # the guide's end of training: a full state dict, then save_model
        acc.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")
        export = Path(root) / f"export_v{version}"
        acc.save_model(model, export)
        state = acc.get_state_dict(model)
        if acc.is_main_process:
            plain = Net()
            plain.load_state_dict(load_file(export / "model.safetensors"), strict=True)
            same(plain.state_dict(), out[f"final_v{version}"], "export")
            same(state, out[f"final_v{version}"], "get_state_dict")
        else:
            assert state == {}, "get_state_dict is the main process's"

    def full(version: int) -> None:
        acc, model, optimizer = build(version, "FULL_STATE_DICT")
        data = batches(STEPS)
        for batch in data[:SAVE_AT]:
            train_step(acc, model, optimizer, batch)
        target = Path(root) / f"full_v{version}"
        safe = version == 2  # FSDP1 writes pytorch_model.bin, FSDP2 model.safetensors
        acc.save_state(target, safe_serialization=safe)
        saved, saved_optim = full_state(model), full_optimizer(model, optimizer)
        names = {p.name for p in target.iterdir()}
        weights_file = "model.safetensors" if safe else "pytorch_model.bin"
        assert {weights_file, "optimizer.bin"} <= names, names
        assert not any(n.startswith(("pytorch_model_fsdp", "optimizer_")) for n in names), names
        if acc.is_main_process:  # the weights load into the plain model
            plain = Net()
            path = target / weights_file
            state = load_file(path) if safe else torch.load(path, weights_only=True)
            plain.load_state_dict(state, strict=True)
            same(plain.state_dict(), saved, weights_file)
        for batch in data[SAVE_AT:]:
            train_step(acc, model, optimizer, batch)
        final = full_state(model)
        AcceleratorState._reset_state()
        acc, model, optimizer = build(version, "FULL_STATE_DICT")
        acc.load_state(target)
        same(full_state(model), saved, "loaded weights")
        same(full_optimizer(model, optimizer), saved_optim, "loaded optimizer")
        for batch in data[SAVE_AT:]:
            train_step(acc, model, optimizer, batch)
        same(full_state(model), final, "continued")
        empty = Path(root) / f"empty_v{version}"
        if acc.is_main_process:
            empty.mkdir()
        acc.wait_for_everyone()
        raises(FileNotFoundError, lambda: acc.load_state(empty), str(empty), "model.safetensors")

    def get_state_dict_equals_reference(version: int) -> None:
        acc, model, optimizer = build(version, "SHARDED_STATE_DICT")  # type does not matter
        for batch in batches(SAVE_AT):
            train_step(acc, model, optimizer, batch)
        state = acc.get_state_dict(model)
        if acc.is_main_process:
            ref = reference(SAVE_AT, acc.num_processes)
            assert set(state) == set(ref), sorted(state)
            for key, value in ref.items():
                assert state[key].device.type == "cpu"
                assert torch.allclose(state[key], value, atol=1e-5), key
        else:
            assert state == {}

    checks = []
    for v in VERSIONS:
        for name, body in zip(
            SAVE_CHECKS, (sharded, full, get_state_dict_equals_reference), strict=True
        ):
            checks.append(_named(f"{name}_v{v}", body, v))
    out["checks"] = run(checks)
    return out if PartialState().is_main_process else {"checks": out["checks"]}


def resume_phase(root: str) -> dict[str, Any]:
    """A restart: load the sharded checkpoints and train to the end; damaged copies refused."""
    out: dict[str, Any] = {}

    def resume(version: int) -> None:
        acc, model, optimizer = build(version)
        acc.load_state(Path(root) / f"sharded_v{version}")
        out[f"loaded_v{version}"] = full_state(model)
        for batch in batches(STEPS)[SAVE_AT:]:
            train_step(acc, model, optimizer, batch)
        out[f"final_v{version}"] = full_state(model)

    def other_version(version: int) -> None:
        """FSDP2 loads FSDP1's sharded checkpoint and the other way round."""
        acc, model, _optimizer = build(3 - version)
        acc.load_state(Path(root) / f"sharded_v{version}")
        out[f"cross_v{version}"] = full_state(model)

    def damaged(version: int) -> None:
        acc, _model, _optimizer = build(version)
        source = Path(root) / f"sharded_v{version}"
        copy = Path(root) / f"damaged_v{version}"
        shard = copy / "pytorch_model_fsdp_0" / "__1_0.distcp"
        if acc.is_main_process:
            shutil.copytree(source, copy)
            with open(shard, "r+b") as handle:
                handle.truncate(10)
        acc.wait_for_everyone()
        raises(ValueError, lambda: acc.load_state(copy), str(shard), "corrupt")

    def merge_in_launch(version: int) -> None:
        """Called by every process: the main one merges, the others wait (or raise with it)."""
        acc = Accelerator(fsdp_plugin=plugin(version, "SHARDED_STATE_DICT"))
        source = Path(root) / f"sharded_v{version}" / "pytorch_model_fsdp_0"
        merge_fsdp_weights(source, Path(root) / "merged_in_launch")
        plain = Net()  # every process sees the file once the call returns
        plain.load_state_dict(load_file(Path(root) / "merged_in_launch" / "model.safetensors"))
        damaged = Path(root) / f"damaged_v{version}" / "pytorch_model_fsdp_0"
        kind = ValueError if acc.is_main_process else RuntimeError
        words = ("__1_0.distcp", "corrupt") + (() if acc.is_main_process else ("main process",))
        raises(kind, lambda: merge_fsdp_weights(damaged, Path(root) / "never"), *words)
        assert not (Path(root) / "never" / "model.safetensors").exists()

    checks = []
    for v in VERSIONS:
        for name, body in zip(RESUME_CHECKS, (resume, other_version), strict=True):
            checks.append(_named(f"{name}_v{v}", body, v))
    checks.append(_named("damaged_shard_named", damaged, 2))
    checks.append(_named("merge_in_launch", merge_in_launch, 2))
    out["checks"] = run(checks)
    return out if PartialState().is_main_process else {"checks": out["checks"]}


def load_at_another_world_size(root: str) -> dict[str, Any]:
    """Each version's sharded checkpoint, loaded by a launch of another size: the full
    weights and optimizer state it gives (on rank 0)."""
    warnings.simplefilter("ignore")
    out: dict[str, Any] = {}
    for version in VERSIONS:
        acc, model, optimizer = build(version)
        acc.load_state(Path(root) / f"sharded_v{version}")
        out[f"loaded_v{version}"] = full_state(model)
        out[f"loaded_optim_v{version}"] = full_optimizer(model, optimizer)
        AcceleratorState._reset_state()
    return out if PartialState().is_main_process else {}


def _named(name: str, body: Callable[[int], None], version: int) -> Callable[[], None]:
    def check() -> None:
        body(version)

    check.__name__ = name
    return check
