"""Which mixed precision trains on which kind of device: the one rule for ``"fp16"`` where
the device cannot train in it.

Accelerate turns fp16 autocast and its gradient scaler on only where the device trains in
fp16 (CUDA, XPU, MPS, and the other accelerators nbaccel does not drive); on a CPU it keeps
``mixed_precision="fp16"`` in its state and trains in full precision (fp32). nbaccel does the
same, says so once, and names the CPU's mixed precision, bf16. Every place that meets the
setting asks here: the state (``Accelerator(mixed_precision=...)``, the config file, the
launch's variable), the training precision, the launchers and the config panel.
"""

from __future__ import annotations

__all__ = [
    "FP16_DEVICE_TYPES",
    "fp16_fallback_warning",
    "fp16_unavailable_note",
    "precision_in_effect",
]

# Device types whose training runs fp16 autocast with a gradient scaler (Accelerate's list,
# as far as torch has the device). The XLA device is not here: fp16 is refused there (an
# error at Accelerator(), as Accelerate refuses it on a TPU), not replaced.
FP16_DEVICE_TYPES: tuple[str, ...] = ("cuda", "xpu", "mps")


def _where(device_type: str) -> str:
    return "the CPU" if device_type == "cpu" else f"the {device_type} device"


def precision_in_effect(mixed_precision: str, device_type: str) -> str:
    """The precision training runs in on ``device_type``: ``"no"`` (full precision) for
    ``"fp16"`` on a device that does not train in fp16 (the CPU), else ``mixed_precision``."""
    if mixed_precision == "fp16" and device_type not in (*FP16_DEVICE_TYPES, "xla"):
        return "no"
    return mixed_precision


def fp16_unavailable_note(device_type: str = "cpu") -> str:
    """Why fp16 is not offered on ``device_type``, and what is (the config panel's message
    and the heart of the warning)."""
    return f"fp16 does not train on {_where(device_type)} (bf16 is its mixed precision)"


def fp16_fallback_warning(device_type: str = "cpu") -> str:
    """The one warning given when ``mixed_precision="fp16"`` meets a device without fp16
    training: what happens instead, and what to ask for."""
    return (
        f"mixed_precision='fp16' runs in full precision (fp32) here, as in Accelerate: "
        f"{fp16_unavailable_note(device_type)}. There is no autocast and no gradient scaler; "
        "accelerator.mixed_precision still reads 'fp16'. Pass mixed_precision='bf16' for "
        f"mixed precision on {_where(device_type)}, or 'no' to train in full precision "
        "without this warning (and change a config file that says fp16)."
    )
