"""Hardware the panel offers: CPU cores, CUDA GPUs, a TPU; found without initialising CUDA."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..enums import PRECISIONS
from ..environment import (
    cuda_device_count,
    fp16_unavailable_note,
    hardware_description,
    precision_in_effect,
    tpu_requested,
)

__all__ = ["FP8_GPUS", "Hardware"]

# GPU model names (as the driver reports them) whose tensor cores do fp8.
FP8_GPUS = ("H100", "H200", "H800", "L4", "L40", "B100", "B200", "GB200", "RTX 40")
TPU_CORES = 8
# The panel's kinds of device as torch names them (the precision rule speaks torch's names).
DEVICE_TYPES = {"cpu": "cpu", "gpu": "cuda", "tpu": "xla"}


@dataclass(frozen=True)
class Hardware:
    """What this machine has, as the config panel offers it.

    Attributes:
        cpu_cores: logical CPU cores.
        gpus: CUDA devices (counted through NVML or the driver's files, never the runtime).
        tpu: True when the environment says a TPU is attached.
        description: one line per kind, e.g. ``"CPU (Intel ..., 2 cores)"``.
        gpu_model: the first GPU's model name, or ``""``.
    """

    cpu_cores: int
    gpus: int = 0
    tpu: bool = False
    description: str = ""
    gpu_model: str = ""

    @classmethod
    def detect(cls) -> Hardware:
        """Look at this machine (CUDA stays uninitialised)."""
        gpus = cuda_device_count()
        lines = [hardware_description(gpus=False)]
        model = ""
        if gpus:
            gpu_text = hardware_description(gpus=True)
            lines.append(gpu_text)
            if "(" in gpu_text:
                model = gpu_text.split("(", 1)[1].rstrip(")")
        tpu = tpu_requested()
        if tpu:
            lines.append(f"TPU ({TPU_CORES} cores)")
        return cls(os.cpu_count() or 1, gpus, tpu, "; ".join(lines), model)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of device a launch can use here: ``cpu``, then ``gpu`` and ``tpu``."""
        return ("cpu",) + (("gpu",) if self.gpus else ()) + (("tpu",) if self.tpu else ())

    def max_processes(self, kind: str) -> int:
        """The most processes this machine runs on ``kind``."""
        return {"gpu": self.gpus, "tpu": TPU_CORES}.get(kind, self.cpu_cores)

    def precisions(self, kind: str) -> tuple[str, ...]:
        """Mixed-precision modes that ``kind`` supports here (fp16 where the device trains in
        it, by the rule ``Accelerator`` and the launchers apply; fp8 on fp8 GPUs)."""
        if kind == "gpu":
            fp8 = any(name in self.gpu_model for name in FP8_GPUS)
            return PRECISIONS if fp8 else tuple(p for p in PRECISIONS if p != "fp8")
        if kind == "tpu":
            return ("no", "bf16")  # fp16 is refused on the XLA device
        return tuple(
            p
            for p in PRECISIONS
            if p != "fp8" and precision_in_effect(p, DEVICE_TYPES.get(kind, kind)) == p
        )

    def precision_problem(self, kind: str, precision: str) -> str | None:
        """Why ``precision`` is not offered on ``kind`` here, with what is; None when it is."""
        allowed = self.precisions(kind)
        if precision in allowed:
            return None
        choose = ", ".join(allowed)
        device = DEVICE_TYPES.get(kind, kind)
        if precision == "fp16" and precision_in_effect(precision, device) != precision:
            return f"{fp16_unavailable_note(device)}; use {choose}"
        return f"{precision} is not supported on {kind.upper()} here; use {choose}"

    def limit_text(self, kind: str) -> str:
        """Why :meth:`max_processes` is what it is, for a message."""
        count = self.max_processes(kind)
        noun = {"gpu": "GPU", "tpu": "TPU core"}.get(kind, "CPU core")
        return f"{count} {noun}{'s' if count != 1 else ''}"
