"""The documented enumerations: distributed types, precisions, RNG, loggers, dynamo backends."""

from __future__ import annotations

import enum

__all__ = ["DistributedType", "DynamoBackend", "LoggerType", "PrecisionType", "RNGType"]


class _StrEnum(str, enum.Enum):
    """A string enum whose members compare equal to their values (``"no" == PrecisionType.NO``)."""

    def __str__(self) -> str:
        return str(self.value)

    @classmethod
    def parse(cls, value: object, argument: str) -> _StrEnum:
        """Return the member for ``value`` (a member or its case-insensitive string).

        Raises:
            ValueError: naming ``argument``, the value given and the allowed values.
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            for name, member in cls.__members__.items():
                if value.lower() in (member.value.lower(), name.lower()):
                    return member
        allowed = ", ".join(repr(m.value) for m in cls)
        raise ValueError(f"{argument}={value!r} is not valid; allowed values are {allowed}.")


class DistributedType(_StrEnum):
    """How the processes of a job share the work."""

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    FSDP = "FSDP"
    XLA = "XLA"
    TPU = "XLA"  # alias: older code compares against DistributedType.TPU
    DEEPSPEED = "DEEPSPEED"
    MEGATRON_LM = "MEGATRON_LM"


class PrecisionType(_StrEnum):
    """Mixed-precision modes."""

    NO = "no"
    FP8 = "fp8"
    FP16 = "fp16"
    BF16 = "bf16"


class RNGType(_StrEnum):
    """Random number generators that can be synchronised between processes."""

    TORCH = "torch"
    CUDA = "cuda"
    MLU = "mlu"
    NPU = "npu"
    XLA = "xla"
    XPU = "xpu"
    GENERATOR = "generator"


class LoggerType(_StrEnum):
    """Experiment trackers that ``log_with`` accepts."""

    ALL = "all"
    JSONL = "jsonl"
    TENSORBOARD = "tensorboard"
    WANDB = "wandb"
    COMETML = "comet_ml"
    MLFLOW = "mlflow"
    AIM = "aim"
    CLEARML = "clearml"
    DVCLIVE = "dvclive"


class DynamoBackend(_StrEnum):
    """``torch.compile`` backends."""

    NO = "NO"
    EAGER = "EAGER"
    AOT_EAGER = "AOT_EAGER"
    INDUCTOR = "INDUCTOR"
    AOT_TS_NVFUSER = "AOT_TS_NVFUSER"
    NVPRIMS_NVFUSER = "NVPRIMS_NVFUSER"
    CUDAGRAPHS = "CUDAGRAPHS"
    OFI = "OFI"
    FX2TRT = "FX2TRT"
    ONNXRT = "ONNXRT"
    TENSORRT = "TENSORRT"
    AOT_TORCHXLA_TRACE_ONCE = "AOT_TORCHXLA_TRACE_ONCE"
    TORCHXLA_TRACE_ONCE = "TORCHXLA_TRACE_ONCE"
    IPEX = "IPEX"
    TVM = "TVM"
