"""FSDP on TPU: the config file's ``xla``, ``xla_fsdp_settings`` and ``xla_fsdp_grad_ckpt``
carried to ``torch_xla``'s ``XlaFullyShardedDataParallel`` (imported only on a TPU)."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

__all__ = ["check_xla_fsdp", "wrap_xla_fsdp"]

_XLA_KEYS = "xla, xla_fsdp_settings and xla_fsdp_grad_ckpt"


def check_xla_fsdp(plugin: Any, device: torch.device) -> None:
    """Refuse ``xla: true`` at once when this process does not run on a TPU."""
    if plugin.xla and device.type != "xla":
        raise ValueError(
            f"fsdp_config sets xla: true (FSDP on TPU, through torch_xla), but this process "
            f"runs on {device.type}, not on a TPU. Drop {_XLA_KEYS} from fsdp_config to "
            "shard with FSDP on CPU or GPU, or run on a TPU host with torch_xla installed."
        )
    if not plugin.xla and (plugin.xla_fsdp_settings or plugin.xla_fsdp_grad_ckpt):
        raise ValueError(
            "fsdp_config sets xla_fsdp_settings or xla_fsdp_grad_ckpt but not xla: true; they "
            "only apply to FSDP on TPU. Set xla: true on a TPU, or drop them."
        )


def _xla_policy(policy: Any) -> Any:
    """torch's wrap policy (as the plugin resolved it) in torch_xla's own form."""
    # torch_xla is installed on TPU hosts only
    from torch_xla.distributed.fsdp import wrap as xla_wrap

    if not isinstance(policy, functools.partial):
        return None
    if "transformer_layer_cls" in policy.keywords:
        return functools.partial(
            xla_wrap.transformer_auto_wrap_policy,
            transformer_layer_cls=policy.keywords["transformer_layer_cls"],
        )
    return functools.partial(
        xla_wrap.size_based_auto_wrap_policy, min_num_params=policy.keywords["min_num_params"]
    )


def wrap_xla_fsdp(model: nn.Module, plugin: Any) -> nn.Module:
    """Shard ``model`` with ``XlaFullyShardedDataParallel`` and the plugin's XLA settings."""
    # torch_xla is installed on TPU hosts only
    from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel, checkpoint_module

    plugin.set_auto_wrap_policy(model)
    kwargs: dict[str, Any] = dict(plugin.xla_fsdp_settings or {})
    policy = _xla_policy(plugin.auto_wrap_policy)
    if policy is not None:
        kwargs.setdefault("auto_wrap_policy", policy)
    if plugin.xla_fsdp_grad_ckpt:

        def wrapper(module: nn.Module, *args: Any, **more: Any) -> nn.Module:
            return XlaFullyShardedDataParallel(checkpoint_module(module), *args, **more)

        kwargs.setdefault("auto_wrapper_callable", wrapper)
    return XlaFullyShardedDataParallel(model, **kwargs)
