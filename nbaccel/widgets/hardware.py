"""Hardware the panel offers: CPU cores, CUDA GPUs, a TPU; found without initialising CUDA."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..enums import PRECISIONS
from ..environment import cuda_device_count, hardware_description, tpu_requested

__all__ = ["FP8_GPUS", "Hardware"]

# GPU model names (as the driver reports them) whose tensor cores do fp8.
FP8_GPUS = ("H100", "H200", "H800", "L4", "L40", "B100", "B200", "GB200", "RTX 40")
TPU_CORES = 8


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
        """Mixed-precision modes that ``kind`` supports here."""
        if kind == "gpu":
            fp8 = any(name in self.gpu_model for name in FP8_GPUS)
            return PRECISIONS if fp8 else tuple(p for p in PRECISIONS if p != "fp8")
        return ("no", "bf16")

    def limit_text(self, kind: str) -> str:
        """Why :meth:`max_processes` is what it is, for a message."""
        count = self.max_processes(kind)
        noun = {"gpu": "GPU", "tpu": "TPU core"}.get(kind, "CPU core")
        return f"{count} {noun}{'s' if count != 1 else ''}"
