"""DDP communication hooks named by ``DistributedDataParallelKwargs(comm_hook=...)``."""

from __future__ import annotations

from typing import Any

from .enums import DDPCommunicationHookType

__all__ = ["register_comm_hook"]


def register_comm_hook(
    model: Any,
    hook: DDPCommunicationHookType,
    wrapper: DDPCommunicationHookType,
    options: dict[str, Any],
) -> None:
    """Register torch's hook for ``hook`` on DDP ``model`` (``"no"``: nothing), compressed by
    ``wrapper`` (``"fp16"`` / ``"bf16"``); PowerSGD hooks get a state built from ``options``."""
    # the hook modules load only when a communication hook is asked for
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    hooks: dict[str, Any] = {
        "fp16": default_hooks.fp16_compress_hook,
        "bf16": default_hooks.bf16_compress_hook,
        "power_sgd": powerSGD_hook.powerSGD_hook,
        "batched_power_sgd": powerSGD_hook.batched_powerSGD_hook,
    }
    wrappers = {
        "fp16": default_hooks.fp16_compress_wrapper,
        "bf16": default_hooks.bf16_compress_wrapper,
    }
    function = hooks.get(str(hook))
    if function is None:
        return
    if str(wrapper) in wrappers:
        function = wrappers[str(wrapper)](function)
    state = None
    if str(hook) in ("power_sgd", "batched_power_sgd"):
        state = powerSGD_hook.PowerSGDState(None, **options)
    model.register_comm_hook(state=state, hook=function)
