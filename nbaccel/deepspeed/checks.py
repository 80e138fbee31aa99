"""The checks of DeepSpeedPlugin's fields: each error names the field and what it may be."""

from __future__ import annotations

from typing import Any

__all__ = ["OFFLOAD_DEVICES", "STAGES", "as_bool", "as_int", "check_offload_device", "check_stage"]

from ..config.deepspeed import OFFLOAD_DEVICES
from ..config.deepspeed import ZERO_STAGES as STAGES


def as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"DeepSpeedPlugin({name}={value!r}) must be True or False.")


def as_int(name: str, value: Any, allowed: tuple[int, ...] | None = None) -> int:
    try:
        number = int(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        number = None
    if number is None or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"DeepSpeedPlugin({name}={value!r}) must be a whole number.")
    if allowed is not None and number not in allowed:
        raise ValueError(
            f"DeepSpeedPlugin({name}={value!r}) is not a ZeRO stage DeepSpeed has; use one of "
            f"{', '.join(map(str, allowed))} (0: plain data parallelism, 1: optimizer states "
            "sharded, 2: and gradients, 3: and parameters)."
        )
    return number


def check_stage(value: Any, where: str = "zero_stage") -> int:
    """A ZeRO stage, checked (``where`` names the field in the message)."""
    return as_int(where, value, STAGES)


def check_offload_device(name: str, value: Any) -> str:
    """An offload device, checked."""
    text = str(value).strip().lower()
    if text not in OFFLOAD_DEVICES:
        raise ValueError(
            f"DeepSpeedPlugin({name}={value!r}) is not an offload device; use one of "
            f"{', '.join(OFFLOAD_DEVICES)}."
        )
    return text
