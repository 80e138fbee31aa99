"""FSDP2 (``fully_shard``) and the documented ``fsdp2_*`` free functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor

from ..state import PartialState
from .checkpointing import apply_checkpointing
from .mesh import check_not_offloading_on_cpu, hybrid_mesh, world_size
from .plugin import FullyShardedDataParallelPlugin
from .policies import module_predicate, resolve_ignored_modules
from .ram import has_meta_tensors

__all__ = [
    "fsdp2_load_full_state_dict",
    "fsdp2_prepare_auto_wrap_policy",
    "fsdp2_prepare_model",
    "fsdp2_switch_optimizer_parameters",
    "shard_fsdp2",
]


def fsdp2_switch_optimizer_parameters(optimizer: torch.optim.Optimizer, mapping: dict) -> None:
    """Switch ``optimizer``'s parameters to their sharded versions, in place.

    Args:
        optimizer: holds the original model parameters.
        mapping: original parameter's ``data_ptr()`` -> sharded parameter.

    Raises:
        KeyError: a parameter of the optimizer has no sharded version (keeping it would leave
            the trained weights unchanged: training would be silently wrong).
    """
    try:
        for group in optimizer.param_groups:
            group["params"] = [mapping[p.data_ptr()] for p in group["params"]]
    except KeyError:
        raise KeyError(
            "A parameter in the optimizer could not be switched to its sharded version: the "
            "optimizer holds a parameter that is not in the prepared model. Build the "
            "optimizer from the parameters of the model you prepare."
        ) from None


def fsdp2_prepare_auto_wrap_policy(
    fsdp2_plugin: FullyShardedDataParallelPlugin, model: nn.Module
) -> Callable[[nn.Module], bool] | None:
    """The plugin's wrap policy for ``model`` as a ``module -> bool`` predicate (or None)."""
    fsdp2_plugin.set_auto_wrap_policy(model)
    return module_predicate(fsdp2_plugin.auto_wrap_policy)


def _mesh(plugin: FullyShardedDataParallelPlugin, device: torch.device) -> DeviceMesh:
    name = plugin.sharding_strategy.name.lstrip("_") if plugin.sharding_strategy else ""
    if name.startswith("HYBRID") or plugin.fsdp_group_size is not None:
        return hybrid_mesh(device, plugin.fsdp_group_size)
    if name == "NO_SHARD":  # every process replicates: groups of one
        return hybrid_mesh(device, 1)
    return init_device_mesh(device.type, (world_size(),))


def _non_persistent_buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    for prefix, module in model.named_modules():
        for name in getattr(module, "_non_persistent_buffers_set", ()):
            buffer = module._buffers.get(name)
            if buffer is not None:
                out[f"{prefix}.{name}" if prefix else name] = buffer
    return out


def _rename_map(model: nn.Module) -> dict[str, int]:
    return {name: id(p) for name, p in model.named_parameters(remove_duplicate=False)}


def shard_fsdp2(
    model: nn.Module, plugin: FullyShardedDataParallelPlugin, device: torch.device
) -> tuple[nn.Module, dict[int, nn.Parameter]]:
    """``fully_shard`` ``model`` (and the layers the policy picks); returns it and
    ``id(original param) -> sharded param`` for optimizers built before."""
    if isinstance(model, FSDPModule):
        return model, {}
    check_not_offloading_on_cpu(plugin.cpu_offload, device)
    ignored = resolve_ignored_modules(model, plugin.ignored_modules)
    predicate = fsdp2_prepare_auto_wrap_policy(plugin, model)
    if plugin.activation_checkpointing:
        offload = bool(plugin.activation_checkpointing_offload)
        apply_checkpointing(model, plugin.auto_wrap_policy, ignored, offload=offload)
    names = _rename_map(model)
    load = plugin.cpu_ram_efficient_loading or plugin.sync_module_states
    if has_meta_tensors(model) and not load:
        raise ValueError(
            "The model has tensors on the meta device (built empty), but neither "
            "cpu_ram_efficient_loading nor sync_module_states is set, so nothing would fill "
            "them. Set cpu_ram_efficient_loading=True."
        )
    full_sd: dict[str, Any] = {}
    buffers: dict[str, torch.Tensor] = {}
    if load:
        full_sd = model.state_dict() if dist.get_rank() == 0 else {}
        buffers = {k: v.clone() for k, v in _non_persistent_buffers(model).items()}
        model = model.to(torch.device("meta"))
    kwargs = {
        "mesh": _mesh(plugin, device),
        "reshard_after_forward": plugin.reshard_after_forward,
        "mp_policy": plugin.mixed_precision_policy or MixedPrecisionPolicy(),
        "ignored_params": {p for m in ignored for p in m.parameters()} or None,
    }
    if plugin.cpu_offload is not None:
        kwargs["offload_policy"] = plugin.cpu_offload
    skipped = {id(m) for m in ignored for m in m.modules()}
    if predicate is not None:
        for module in reversed(list(model.modules())[1:]):
            free = id(module) not in skipped and not isinstance(module, FSDPModule)
            if free and predicate(module):
                fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    if load:
        _load_into(model, full_sd, device, buffers)
    new = dict(model.named_parameters(remove_duplicate=False))
    return model, {old: new[name] for name, old in names.items() if name in new}


def _load_into(
    model: nn.Module, full_sd: dict[str, Any], device: torch.device, buffers: dict
) -> None:
    _broadcast_into(model, full_sd, device)
    for fqn, tensor in buffers.items():
        owner, _, name = fqn.rpartition(".")
        module = model.get_submodule(owner) if owner else model
        module.register_buffer(name, tensor.to(device), persistent=False)


def fsdp2_prepare_model(accelerator: Any, model: nn.Module) -> nn.Module:
    """Prepare ``model`` for FSDP2 in place (the accelerator's ``fsdp_plugin``); returns it."""
    plugin = accelerator.state.fsdp_plugin
    if plugin is None:
        raise ValueError("fsdp2_prepare_model needs an Accelerator created with fsdp_plugin=.")
    prepared, _mapping = shard_fsdp2(model, plugin, accelerator.device)
    return prepared


def _broadcast_into(model: nn.Module, full_sd: dict[str, Any], device: torch.device) -> None:
    """Fill ``model`` (sharded, on meta) from rank 0's ``full_sd``, one tensor at a time."""
    is_source = dist.get_rank() == 0
    sharded: dict[str, Any] = {}
    for name, meta in model.state_dict().items():
        if is_source:
            if name not in full_sd:
                raise KeyError(f"fsdp2_load_full_state_dict: full_sd has no entry {name!r}.")
            full = full_sd[name].detach().to(device=device, dtype=meta.dtype).contiguous()
        else:
            full = torch.empty(meta.shape, dtype=meta.dtype, device=device)
        dist.broadcast(full, src=0)
        if isinstance(meta, DTensor):
            sharded[name] = nn.Parameter(_own_shard(full, meta), requires_grad=meta.requires_grad)
        else:
            sharded[name] = full
        del full
    model.load_state_dict(sharded, assign=True)


def _own_shard(full: torch.Tensor, meta: DTensor) -> DTensor:
    """This process's shard of ``full`` as a DTensor that does not keep ``full`` alive."""
    shard = distribute_tensor(full, meta.device_mesh, meta.placements, src_data_rank=None)
    local = shard.to_local()
    if local.untyped_storage().data_ptr() != full.untyped_storage().data_ptr():
        return shard
    return DTensor.from_local(
        local.clone(), meta.device_mesh, meta.placements, shape=meta.shape, stride=meta.stride()
    )


def fsdp2_load_full_state_dict(accelerator: Any, model: nn.Module, full_sd: dict) -> nn.Module:
    """Load a full state dict (needed on rank 0 only) into a sharded model, in place.

    The model is expected on the meta device; every tensor is broadcast from rank 0 and
    only this process's shard is kept, so no process holds a second full copy.
    """
    del accelerator  # the process group is the default one
    device = next((p.device for p in model.parameters() if not p.is_meta), None)

    _broadcast_into(model, full_sd, device or PartialState().device)
    return model
