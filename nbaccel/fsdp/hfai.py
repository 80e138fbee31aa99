"""hfai's ``FullyShardedDataParallel``: FSDP with ``fsdp_group_size`` groups that replicate."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel as TorchFSDP
from torch.distributed.fsdp import ShardingStrategy, StateDictType

from .mesh import hybrid_mesh

__all__ = ["FullyShardedDataParallel"]

_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")


def _clean(name: str) -> str:
    for prefix in _PREFIXES:
        name = name.replace(prefix, "")
    return name


def _strategy(reshard_after_forward: bool, hybrid: bool) -> ShardingStrategy:
    if hybrid:
        return (
            ShardingStrategy.HYBRID_SHARD
            if reshard_after_forward
            else ShardingStrategy._HYBRID_SHARD_ZERO2
        )
    return ShardingStrategy.FULL_SHARD if reshard_after_forward else ShardingStrategy.SHARD_GRAD_OP


class FullyShardedDataParallel(TorchFSDP):
    """FSDP used like PyTorch's (hfai's API).

    Args:
        module: the model.
        process_group: the process group (default: all processes).
        auto_wrap_policy: which submodules become their own unit, e.g.
            ``functools.partial(size_based_auto_wrap_policy, min_num_params=...)``.
        reshard_after_forward: free the gathered parameters after forward (default True).
        backward_prefetch: ``BackwardPrefetch.BACKWARD_PRE`` / ``BACKWARD_POST`` or None.
        forward_prefetch: prefetch the next all-gather in forward.
        fsdp_group_size: processes that shard together; groups replicate each other (data
            parallel across groups). None: all processes form one group.

    ``state_dict()`` is this process's own shards; inside ``summon_full_params()`` it is the
    full state dict, equal to ``model.module.state_dict()`` of a plain model.
    """

    def __init__(
        self,
        module: nn.Module,
        process_group: Any = None,
        auto_wrap_policy: Any = None,
        reshard_after_forward: bool = True,
        backward_prefetch: Any = None,
        forward_prefetch: bool = False,
        fsdp_group_size: int | None = None,
        _is_root: bool = True,
    ) -> None:
        del _is_root  # torch finds the root itself
        if not isinstance(reshard_after_forward, bool):
            raise ValueError(f"reshard_after_forward={reshard_after_forward!r} must be a bool.")
        device = next((p.device for p in module.parameters()), torch.device("cpu"))
        mesh = None
        world = dist.get_world_size() if dist.is_initialized() else 1
        if fsdp_group_size is not None and fsdp_group_size != world:
            if process_group is not None:
                raise ValueError("Pass process_group or fsdp_group_size, not both.")
            mesh = hybrid_mesh(device, fsdp_group_size)
        super().__init__(
            module,
            process_group=process_group,
            sharding_strategy=_strategy(reshard_after_forward, mesh is not None),
            auto_wrap_policy=auto_wrap_policy,
            backward_prefetch=backward_prefetch,
            forward_prefetch=forward_prefetch,
            device_id=device,
            device_mesh=mesh,
        )
        self._hfai_full = False

    @contextlib.contextmanager
    def summon_full_params(self, *args: Any, **kwargs: Any) -> Iterator[None]:  # type: ignore[override]
        """Gather the full parameters (every process calls it); inside, ``state_dict()`` and
        ``load_state_dict()`` see the full model, and changes are written back to the shards."""
        kwargs.setdefault("writeback", True)
        with TorchFSDP.summon_full_params(self, *args, **kwargs):
            self._hfai_full = True
            try:
                yield
            finally:
                self._hfai_full = False

    def _full_tensors(self) -> dict[str, torch.Tensor]:
        """Original name -> gathered tensor (parameters, then persistent buffers)."""
        tensors: dict[str, torch.Tensor] = {}
        for prefix, module in self.module.named_modules():
            if isinstance(module, TorchFSDP):
                continue
            skip: set[str] = getattr(module, "_non_persistent_buffers_set", set())
            for name, tensor in [*module._parameters.items(), *module._buffers.items()]:
                if tensor is None or name in skip or name == "_flat_param":
                    continue
                tensors.setdefault(_clean(f"{prefix}.{name}" if prefix else name), tensor)
        return tensors

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        """Full state dict inside ``summon_full_params()``, else this process's shards."""
        if self._hfai_full:
            return {k: v.detach().clone() for k, v in self._full_tensors().items()}
        with TorchFSDP.state_dict_type(self, StateDictType.SHARDED_STATE_DICT):
            return super().state_dict(*args, **kwargs)

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> Any:
        """Load a full state dict inside ``summon_full_params()``, else this process's own."""
        if not self._hfai_full:
            with TorchFSDP.state_dict_type(self, StateDictType.SHARDED_STATE_DICT):
                return super().load_state_dict(state_dict, strict=strict, assign=assign)
        targets = self._full_tensors()
        missing = sorted(set(targets) - set(state_dict))
        unexpected = sorted(set(state_dict) - set(targets))
        if strict and (missing or unexpected):
            raise RuntimeError(
                f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}; the "
                "state dict comes from another model (or pass strict=False)."
            )
        with torch.no_grad():
            for name, value in state_dict.items():
                if name in targets:
                    targets[name].copy_(value)
        return nn.modules.module._IncompatibleKeys(missing, unexpected)
