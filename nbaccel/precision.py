"""Mixed precision: autocast, the fp16 GradScaler, and the fp8 hardware check."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .environment import precision_in_effect, xla_bf16_storage_requested
from .kwargs_handlers import AutocastKwargs, GradScalerKwargs
from .ops import convert_to_fp32

__all__ = ["Precision", "check_fp8_support"]

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def check_fp8_support(device: torch.device) -> None:
    """Raise unless fp8 training can run here (NVIDIA compute capability 8.9+ and torchao)."""
    if device.type != "cuda":
        raise ValueError(
            f"mixed_precision='fp8' needs an NVIDIA GPU with compute capability 8.9 or newer "
            f"(H100, L4, RTX 40xx); this process runs on {device.type}. Use 'bf16' instead."
        )
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (8, 9):
        raise ValueError(
            f"mixed_precision='fp8' needs compute capability 8.9 or newer; {device} has "
            f"{major}.{minor}. Use 'bf16' (or 'fp16' on older GPUs) instead."
        )
    try:
        import torchao.float8  # noqa: F401  # optional: only fp8 training needs torchao
    except ImportError:
        raise ValueError(
            "mixed_precision='fp8' trains through torchao's float8 layers: pip install torchao"
        ) from None


class Precision:
    """The precision policy of one Accelerator.

    Args:
        mixed_precision: ``"no"``, ``"fp16"``, ``"bf16"`` or ``"fp8"``; ``"fp16"`` on a
            device that does not train in fp16 (the CPU) runs in full precision, without
            autocast or scaler, as in Accelerate (``environment/precision.py``).
        device: the device computations run on.
        autocast_kwargs: options for ``torch.autocast``.
        scaler_kwargs: options for the fp16 gradient scaler.
    """

    def __init__(
        self,
        mixed_precision: str,
        device: torch.device,
        autocast_kwargs: AutocastKwargs | None = None,
        scaler_kwargs: GradScalerKwargs | None = None,
    ) -> None:
        if mixed_precision == "fp8":
            check_fp8_support(device)
        if mixed_precision == "fp16" and device.type == "xla":
            raise ValueError(
                "mixed_precision='fp16' is not available on the XLA device (Accelerate refuses it "
                "on TPU too); use mixed_precision='bf16', which autocasts to bfloat16 there."
            )
        self.mixed_precision = mixed_precision
        # torch_xla registers autocast for its own device type: "xla" (bf16 on TPU and CPU)
        known = ("cuda", "cpu", "xpu", "mps", "xla")
        self.device_type = device.type if device.type in known else "cpu"
        in_effect = precision_in_effect(mixed_precision, device.type)  # fp16 on a CPU: "no"
        self.in_effect = in_effect
        fp8_autocast = torch.bfloat16 if mixed_precision == "fp8" else None
        self.dtype = _DTYPES.get(in_effect, fp8_autocast)
        if device.type == "xla" and xla_bf16_storage_requested():
            self.dtype = None  # torch_xla keeps float32 in bfloat16 itself (XLA_USE_BF16)
        self.autocast_kwargs = autocast_kwargs or AutocastKwargs()
        self.scaler: torch.amp.GradScaler | None = None
        if in_effect == "fp16":
            options = (scaler_kwargs or GradScalerKwargs()).to_dict()
            self.scaler = torch.amp.GradScaler(self.device_type, **options)

    def autocast(
        self, handler: AutocastKwargs | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        """A context in which operations run in the mixed-precision dtype (no-op in fp32)."""
        if self.dtype is None:
            return contextlib.nullcontext()
        options = handler or self.autocast_kwargs
        kwargs: dict[str, Any] = {"enabled": options.enabled}
        if options.cache_enabled is not None:
            kwargs["cache_enabled"] = options.cache_enabled
        return torch.autocast(self.device_type, dtype=self.dtype, **kwargs)

    def wrap_forward(self, model: nn.Module) -> None:
        """Run ``model.forward`` under autocast and return fp32 outputs (keeps the original)."""
        if self.dtype is None or hasattr(model, "_nbaccel_original_forward"):
            return
        original: Callable[..., Any] = model.forward

        @functools.wraps(original)
        def forward(*args: Any, **kwargs: Any) -> Any:
            with self.autocast():
                outputs = original(*args, **kwargs)
            return convert_to_fp32(outputs)

        model._nbaccel_original_forward = original  # type: ignore[assignment]
        model.forward = forward

    @staticmethod
    def unwrap_forward(model: nn.Module) -> None:
        """Undo :meth:`wrap_forward`."""
        original = model.__dict__.pop("_nbaccel_original_forward", None)
        if original is not None:
            model.forward = original

    def prepare_fp8(self, model: nn.Module) -> nn.Module:
        """Swap linear layers for torchao's float8 training layers (fp8 only)."""
        if self.mixed_precision != "fp8":
            return model
        # torchao is optional: only fp8 needs it
        from torchao.float8 import convert_to_float8_training

        convert_to_float8_training(model)
        return model
