"""FSDP1: wrap a model in ``FullyShardedDataParallel`` as the plugin says."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy

from .checkpointing import apply_checkpointing
from .mesh import check_not_offloading_on_cpu, hybrid_mesh
from .plugin import FullyShardedDataParallelPlugin
from .policies import resolve_ignored_modules
from .ram import has_meta_tensors

__all__ = ["flat_parameter_mapping", "wrap_fsdp1"]

_HYBRID = (ShardingStrategy.HYBRID_SHARD, ShardingStrategy._HYBRID_SHARD_ZERO2)


def _check_meta(model: nn.Module, plugin: FullyShardedDataParallelPlugin) -> None:
    if has_meta_tensors(model) and not plugin.sync_module_states:
        raise ValueError(
            "The model has tensors on the meta device (built empty), but sync_module_states is "
            "off, so nothing would fill them. Set cpu_ram_efficient_loading=True (or "
            "sync_module_states=True) so that process 0's weights are broadcast."
        )


def _sync_on_cpu(model: nn.Module, plugin: FullyShardedDataParallelPlugin) -> None:
    """``sync_module_states`` on the CPU: torch's needs a GPU, so process 0's parameters and
    buffers are broadcast here, before wrapping (empty ones are made real first)."""
    if has_meta_tensors(model):
        model.to_empty(device=torch.device("cpu"))  # filled from process 0 below
    ignored = resolve_ignored_modules(model, plugin.ignored_modules)
    skip = {id(t) for m in ignored for t in [*m.parameters(), *m.buffers()]}
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if id(tensor) not in skip:
                dist.broadcast(tensor.data, src=0)


def _kwargs(
    model: nn.Module, plugin: FullyShardedDataParallelPlugin, device: torch.device
) -> dict[str, Any]:
    strategy = plugin.sharding_strategy
    kwargs: dict[str, Any] = {
        "sharding_strategy": strategy,
        "cpu_offload": plugin.cpu_offload,
        "auto_wrap_policy": plugin.auto_wrap_policy,
        "backward_prefetch": plugin.backward_prefetch,
        "mixed_precision": plugin.mixed_precision_policy,
        "ignored_modules": resolve_ignored_modules(model, plugin.ignored_modules) or None,
        "sync_module_states": plugin.sync_module_states,
        "forward_prefetch": plugin.forward_prefetch,
        "limit_all_gathers": plugin.limit_all_gathers,
        "use_orig_params": plugin.use_orig_params,
        "device_id": device,
    }
    if device.type == "cpu" and plugin.sync_module_states:
        _sync_on_cpu(model, plugin)
        kwargs["sync_module_states"] = False  # done above
    if kwargs["sync_module_states"] or has_meta_tensors(model):
        kwargs["param_init_fn"] = plugin.param_init_fn
    if strategy in _HYBRID:
        kwargs["device_mesh"] = hybrid_mesh(device, plugin.fsdp_group_size)
    elif plugin.fsdp_group_size is not None:
        raise ValueError(
            f"fsdp_group_size={plugin.fsdp_group_size} needs a hybrid strategy: set "
            "reshard_after_forward='HYBRID_SHARD' (or 'HYBRID_SHARD_ZERO2')."
        )
    return kwargs


def _param_keys(model: nn.Module) -> dict[tuple[int, str], nn.Parameter]:
    return {
        (id(module), name): param
        for module in model.modules()
        for name, param in module.named_parameters(recurse=False)
    }


def flat_parameter_mapping(
    before: dict[tuple[int, str], nn.Parameter], wrapped: nn.Module
) -> dict[int, nn.Parameter]:
    """``id(original parameter) -> the parameter that now trains it`` (its FlatParameter)."""
    mapping: dict[int, nn.Parameter] = {}
    for param in wrapped.parameters():
        infos = list(getattr(param, "_param_infos", []) or [])
        for info in infos:
            original = before.get((id(info.module), info.param_name))
            if original is not None:
                mapping[id(original)] = param
        for shared in getattr(param, "_shared_param_infos", []) or []:
            original = before.get((id(shared.module), shared.param_name))
            if original is not None:
                mapping[id(original)] = param
        if not infos:
            mapping[id(param)] = param
    return mapping


def wrap_fsdp1(
    model: nn.Module, plugin: FullyShardedDataParallelPlugin, device: torch.device
) -> tuple[nn.Module, dict[int, nn.Parameter]]:
    """The wrapped model and ``id(original param) -> trained param`` for optimizers."""
    if isinstance(model, FullyShardedDataParallel):
        return model, {}
    check_not_offloading_on_cpu(plugin.cpu_offload, device)
    _check_meta(model, plugin)
    plugin.set_auto_wrap_policy(model)
    if plugin.activation_checkpointing:
        ignored = resolve_ignored_modules(model, plugin.ignored_modules)
        apply_checkpointing(model, plugin.auto_wrap_policy, ignored)
    before = _param_keys(model)
    wrapped = FullyShardedDataParallel(model, **_kwargs(model, plugin, device))
    return wrapped, flat_parameter_mapping(before, wrapped)
