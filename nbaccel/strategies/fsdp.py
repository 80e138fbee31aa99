"""FSDP: parameters, gradients and optimizer state sharded across processes (FSDP1 or FSDP2)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
from torch.distributed.tensor import DTensor

from ..fsdp.fsdp1 import wrap_fsdp1
from ..fsdp.fsdp2 import shard_fsdp2
from ..fsdp.xla_fsdp import check_xla_fsdp, wrap_xla_fsdp
from ..state import AcceleratorState
from .base import Strategy

__all__ = ["FSDPStrategy", "switch_parameters"]


def switch_parameters(optimizer: Any, mapping: dict[int, nn.Parameter]) -> bool:
    """Point ``optimizer`` at the sharded parameters (``id(original) -> new``); returns
    whether anything changed. Several originals that share one flat parameter become one."""
    groups = optimizer.param_groups
    if not any(id(p) in mapping and mapping[id(p)] is not p for g in groups for p in g["params"]):
        return False
    if any(optimizer.state.get(p) for g in groups for p in g["params"]):
        raise RuntimeError(
            "The optimizer already has state for the unsharded parameters; prepare the model "
            "and the optimizer before the first optimizer step."
        )
    owner: dict[int, int] = {}
    for index, group in enumerate(groups):
        new: list[nn.Parameter] = []
        for param in group["params"]:
            target = mapping.get(id(param), param)
            if owner.setdefault(id(target), index) != index:
                raise ValueError(
                    "Two optimizer parameter groups hold parameters that FSDP flattened into "
                    "one FlatParameter; set use_orig_params=True (or fsdp_version=2) to keep "
                    "several parameter groups."
                )
            if all(target is not seen for seen in new):
                new.append(target)
        group["params"] = new
    return True


class FSDPStrategy(Strategy):
    """Wraps models with FSDP1 ``FullyShardedDataParallel`` or FSDP2 ``fully_shard``."""

    def __init__(self, plugin: Any) -> None:

        check_xla_fsdp(plugin, AcceleratorState().device)  # xla: true off a TPU fails here
        self.plugin = plugin
        self._mapping: dict[int, nn.Parameter] = {}
        self._models: list[nn.Module] = []

    def wrap_model(self, model: nn.Module, **kwargs: Any) -> nn.Module:
        """Shard ``model`` as the plugin says (``device`` is this process's device)."""
        device: torch.device = kwargs.pop("device", None) or AcceleratorState().device
        precision = AcceleratorState().mixed_precision
        if precision in ("fp16", "bf16") and self.plugin.mixed_precision_policy is None:
            self.plugin.set_mixed_precision(precision)
        if self.plugin.xla:
            wrapped = wrap_xla_fsdp(model, self.plugin)
            self._models.append(wrapped)
            return wrapped
        if self.plugin.fsdp_version == 2:
            wrapped, mapping = shard_fsdp2(model, self.plugin, device)
        else:
            wrapped, mapping = wrap_fsdp1(model, self.plugin, device)
        self._mapping.update(mapping)
        self._models.append(wrapped)
        return wrapped

    def reduce_gradients(self, optimizer: Any) -> None:
        """FSDP reduces gradients itself; here optimizers built before ``prepare`` are
        switched to the sharded parameters (once)."""
        switch_parameters(optimizer, self._mapping)

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager[Any]:
        """Skip the gradient reduce-scatter in backward (gradient accumulation)."""

        if isinstance(model, FullyShardedDataParallel):
            return model.no_sync()
        if isinstance(model, FSDPModule):
            return _fsdp2_no_sync(model)
        return contextlib.nullcontext()

    def clip_grad_norm_(
        self, parameters: Iterable[torch.Tensor] | torch.Tensor, max_norm: float, norm_type: float
    ) -> torch.Tensor:
        """Clip by the norm over all shards (every process gets the same total norm)."""

        params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        wanted = {id(p) for p in params}
        for model in self._models:
            if isinstance(model, FullyShardedDataParallel):
                owned = {id(p) for p in model.parameters()}
                if wanted and wanted <= owned:
                    return model.clip_grad_norm_(max_norm, norm_type)
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)
        return norm.full_tensor() if isinstance(norm, DTensor) else norm

    @property
    def sharded_checkpoints(self) -> bool:
        """Whether ``save_state`` writes sharded (DCP) checkpoints (the plugin's
        ``state_dict_type``, read at each save)."""
        # torch.distributed.checkpoint is slow to import: only FSDP checkpoints pay for it
        from ..fsdp.state_dict import uses_sharded_checkpoints

        return uses_sharded_checkpoints(self.plugin)

    def optimizer_pairs(
        self, models: list[nn.Module], optimizers: list[Any]
    ) -> list[tuple[nn.Module, torch.optim.Optimizer]]:
        """Each optimizer (the torch optimizer inside its wrapper, switched to the sharded
        parameters) with the prepared model whose parameters it trains."""
        pairs = []
        for index, optimizer in enumerate(optimizers):
            inner = getattr(optimizer, "optimizer", optimizer)
            switch_parameters(inner, self._mapping)
            held = {id(p) for group in inner.param_groups for p in group["params"]}
            owner = next(
                (m for m in models if held and held <= {id(p) for p in m.parameters()}), None
            )
            if owner is None:
                raise ValueError(
                    f"Optimizer {index} ({type(inner).__name__}) does not train the parameters "
                    "of one prepared FSDP model, so its sharded state cannot be matched to a "
                    "model; give every optimizer the parameters of one model and prepare both."
                )
            pairs.append((owner, inner))
        return pairs

    @staticmethod
    def unwrap_model(model: nn.Module) -> nn.Module:
        """Peel FSDP1 wrappers as well as DDP / compile ones (FSDP2 models are the model)."""

        while True:
            model = Strategy.unwrap_model(model)
            if not isinstance(model, FullyShardedDataParallel):
                return model
            model = model.module


@contextlib.contextmanager
def _fsdp2_no_sync(model: Any) -> Iterator[None]:
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)
