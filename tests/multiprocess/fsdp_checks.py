"""Rank-side FSDP checks over one gloo process group: every rank runs them all in order."""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable
from typing import Any

import torch
from fsdp_ram_check import ram_efficient_loading_others_hold_no_full_copy
from torch import nn

from nbaccel import Accelerator, AcceleratorState, DistributedType, PartialState
from nbaccel.fsdp import FullyShardedDataParallelPlugin as Plugin
from tests.support.fsdp import Block, Net, full_state, raises
from tests.support.fsdp_checkpoints import run

CHECKS: list[Callable[[], None]] = []
STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
TABLE: dict[str, str] = {}
ATOL = 1e-5  # fp32 training vs the single-process reference


def check(function: Callable[[], None]) -> Callable[[], None]:
    CHECKS.append(function)
    return function


def run_all_checks(only: list[str] | None = None) -> dict[str, str]:
    """``{check: "ok" or traceback}``, plus ``table:v{1,2}:{strategy}`` entries."""
    results = run([f for f in CHECKS if only is None or f.__name__ in only])
    return {**results, **TABLE}


def batches(steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    world = PartialState().num_processes
    return [
        (torch.randn(4 * world, 8, generator=g), torch.randn(4 * world, 1, generator=g))
        for _ in range(steps)
    ]


def reference(
    steps: int, accum: int = 1, clip: float | None = None, frozen: str | None = None
) -> dict[str, torch.Tensor]:
    """One process, whole batches: what every sharded run must reproduce."""
    model = freeze(Net(), frozen)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = batches(steps * accum)
    for i in range(steps):
        for x, y in data[i * accum : (i + 1) * accum]:
            (nn.functional.mse_loss(model(x), y) / accum).backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad()
    return {k: v.detach() for k, v in model.state_dict().items()}


def freeze(model: nn.Module, name: str | None) -> nn.Module:
    """Ignored modules are not synchronised by FSDP: the checks freeze them."""
    if name is not None:
        model.get_submodule(name).requires_grad_(False)
    return model


def train(
    plugin: Plugin,
    steps: int = 3,
    accum: int = 1,
    clip: float | None = None,
    frozen: str | None = None,
) -> Any:
    acc = Accelerator(fsdp_plugin=plugin, gradient_accumulation_steps=accum)
    raw = freeze(Net(), frozen)
    opt = torch.optim.SGD(raw.parameters(), lr=0.1)  # created before prepare
    model, opt = acc.prepare(raw, opt)
    rank, world = acc.process_index, acc.num_processes
    for x, y in batches(steps * accum):
        with acc.accumulate(model):
            out = model(x[rank::world])
            acc.backward(nn.functional.mse_loss(out.float(), y[rank::world]))
            if clip is not None and acc.sync_gradients:
                acc.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            opt.zero_grad()
    return acc, model


def assert_matches(model: nn.Module, ref: dict[str, torch.Tensor], atol: float = ATOL) -> None:
    got = full_state(model)
    assert set(got) == set(ref), f"keys differ: {sorted(got)} vs {sorted(ref)}"
    for k, v in ref.items():
        diff = (got[k] - v).abs().max().item()
        assert diff <= atol, f"{k}: max difference {diff:.2e} > {atol:.0e}"


def hybrid_group() -> int | None:
    return 2 if PartialState().num_processes == 4 else None


CHECKS.append(ram_efficient_loading_others_hold_no_full_copy)  # first: ru_maxrss is a peak


@check
def reports_fsdp() -> None:
    acc = Accelerator(fsdp_plugin=Plugin())
    assert acc.distributed_type == DistributedType.FSDP


def _table_entry(version: int, name: str) -> None:
    key = f"table:v{version}:{name}"
    try:
        plugin = Plugin(
            fsdp_version=version,
            sharding_strategy=name,
            fsdp_group_size=hybrid_group() if name.startswith("HYBRID") else None,
            auto_wrap_policy="transformer_based_wrap",
            transformer_cls_names_to_wrap=["Block"],
        )
        _acc, model = train(plugin)
        assert_matches(model, reference(3))
        TABLE[key] = "ok"
    except BaseException:
        TABLE[key] = traceback.format_exc()
    AcceleratorState._reset_state()


@check
def sharding_table() -> None:
    for version in (1, 2):
        for name in STRATEGIES:
            _table_entry(version, name)


def _policies(version: int) -> None:
    kinds: list[dict[str, Any]] = [
        {"auto_wrap_policy": "transformer_based_wrap", "transformer_cls_names_to_wrap": ["Block"]},
        {"auto_wrap_policy": "size_based_wrap", "min_num_params": 50},
        {"auto_wrap_policy": "no_wrap"},
        {
            "auto_wrap_policy": lambda module, recurse, nonwrapped_numel: (
                isinstance(module, Block) if not recurse else True
            )
        },
    ]
    for kwargs in kinds:
        _acc, model = train(Plugin(fsdp_version=version, **kwargs))
        assert_matches(model, reference(3))
        AcceleratorState._reset_state()


@check
def wrap_policies_v1() -> None:
    _policies(1)


@check
def wrap_policies_v2() -> None:
    _policies(2)


def _ignored(version: int) -> None:
    for ignored, name in (("head", "head"), ("blocks\\.1", "blocks.1")):
        _acc, model = train(Plugin(fsdp_version=version, ignored_modules=ignored), frozen=name)
        kept = model.get_submodule(name).lin.weight if "blocks" in name else model.head.weight
        assert type(kept) is nn.Parameter and kept.shape[-1] == 8  # not sharded
        assert_matches(model, reference(3, frozen=name))
        AcceleratorState._reset_state()


@check
def ignored_modules_v1() -> None:
    _ignored(1)


@check
def ignored_modules_v2() -> None:
    _ignored(2)


def _checkpointing(version: int, offload: bool = False) -> None:
    _acc, model = train(
        Plugin(
            fsdp_version=version,
            activation_checkpointing=True,
            activation_checkpointing_offload=offload,
            auto_wrap_policy="transformer_based_wrap",
            transformer_cls_names_to_wrap=["Block"],
        )
    )
    names = [type(m).__name__ for m in model.modules()]
    assert "CheckpointWrapper" in names, names
    assert ("OffloadWrapper" in names) is offload, names
    assert_matches(model, reference(3))


@check
def activation_checkpointing_v1() -> None:
    _checkpointing(1)


@check
def activation_checkpointing_v2() -> None:
    _checkpointing(2)


@check
def activation_checkpointing_offload_v2() -> None:
    _checkpointing(2, offload=True)


def _accumulation(version: int) -> None:
    _acc, model = train(Plugin(fsdp_version=version), steps=2, accum=2)
    assert_matches(model, reference(2, accum=2))


@check
def gradient_accumulation_v1() -> None:
    _accumulation(1)


@check
def gradient_accumulation_v2() -> None:
    _accumulation(2)


@check
def no_sync_keeps_local_gradients() -> None:
    for version in (1, 2):
        acc = Accelerator(fsdp_plugin=Plugin(fsdp_version=version), gradient_accumulation_steps=2)
        model = acc.prepare(Net())
        x = torch.randn(4, 8) + acc.process_index
        with acc.accumulate(model):
            model(x).sum().backward()
        params = list(model.parameters())
        if version == 1:  # unsharded, unreduced flat gradient
            p = params[0]
            assert p.grad is not None and p.grad.numel() == p._unpadded_unsharded_size.numel()
        else:  # the reduce-scatter did not run: no sharded gradient yet
            assert all(p.grad is None for p in params)
        AcceleratorState._reset_state()


def _clip(version: int) -> None:
    _acc, model = train(Plugin(fsdp_version=version, use_orig_params=version == 1), clip=0.05)
    assert_matches(model, reference(3, clip=0.05))


@check
def clip_grad_norm_v1() -> None:
    _clip(1)


@check
def clip_grad_norm_v2() -> None:
    _clip(2)


@check
def mixed_precision_bf16() -> None:
    for version, policy in (
        (1, {"param_dtype": "bf16", "reduce_dtype": "bf16", "buffer_dtype": "bf16"}),
        (2, {"param_dtype": torch.bfloat16, "reduce_dtype": "fp32"}),
    ):
        acc = Accelerator(fsdp_plugin=Plugin(fsdp_version=version, mixed_precision_policy=policy))
        model = acc.prepare(Net())
        assert model(torch.randn(2, 8)).dtype == torch.bfloat16
        AcceleratorState._reset_state()
        _acc, model = train(Plugin(fsdp_version=version, mixed_precision_policy=policy))
        assert_matches(model, reference(3), atol=3e-2)
        AcceleratorState._reset_state()


@check
def param_groups() -> None:
    """Two groups (head frozen by lr=0) with use_orig_params; refused without it."""

    def two_groups(use_orig: bool) -> nn.Module:
        acc = Accelerator(fsdp_plugin=Plugin(use_orig_params=use_orig))
        raw = Net()
        groups = [
            {"params": raw.blocks.parameters()},
            {"params": raw.head.parameters(), "lr": 0.0},
        ]
        model, opt = acc.prepare(raw, torch.optim.SGD(groups, lr=0.1))
        model(torch.randn(2, 8)).sum().backward()
        opt.step()
        return model

    got = full_state(two_groups(True))
    fresh = Net().state_dict()
    assert torch.equal(got["head.weight"], fresh["head.weight"])
    assert not torch.equal(got["blocks.0.lin.weight"], fresh["blocks.0.lin.weight"])
    AcceleratorState._reset_state()
    raises(ValueError, lambda: two_groups(False), "use_orig_params=True")


@check
def cpu_offload_refused_on_cpu() -> None:
    for version in (1, 2):
        acc = Accelerator(fsdp_plugin=Plugin(fsdp_version=version, cpu_offload=True))
        raises(ValueError, functools.partial(acc.prepare, Net()), "cpu_offload", "CPU-only")
        AcceleratorState._reset_state()


@check
def fsdp2_load_full_state_dict_from_rank0() -> None:
    from torch.distributed.fsdp import fully_shard

    from nbaccel.utils import fsdp2_load_full_state_dict

    acc = Accelerator(fsdp_plugin=Plugin(fsdp_version=2))
    source = Net()
    with torch.no_grad():
        for p in source.parameters():
            p.add_(1.0)
    full = source.state_dict() if acc.is_main_process else {}
    with torch.device("meta"):
        model = Net()
    fully_shard(model)
    fsdp2_load_full_state_dict(acc, model, full)
    got = full_state(model)
    for k, v in source.state_dict().items():
        assert torch.equal(got[k], v), k


@check
def hfai_examples_as_written() -> None:
    from hfai_examples import run_examples

    run_examples()
