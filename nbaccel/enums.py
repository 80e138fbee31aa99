"""The documented enumerations: distributed types, precisions, RNG, loggers, dynamo backends."""

from __future__ import annotations

import enum

__all__ = [
    "PRECISIONS",
    "ComputeEnvironment",
    "CustomDtype",
    "DDPCommunicationHookType",
    "DistributedType",
    "DynamoBackend",
    "LoggerType",
    "PrecisionType",
    "RNGType",
    "SageMakerDistributedType",
]


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
    # Accelerate's other device families: nbaccel never selects them, code that lists them works.
    MULTI_NPU = "MULTI_NPU"
    MULTI_MLU = "MULTI_MLU"
    MULTI_SDAA = "MULTI_SDAA"
    MULTI_MUSA = "MULTI_MUSA"
    MULTI_XPU = "MULTI_XPU"
    MULTI_HPU = "MULTI_HPU"
    MULTI_NEURON = "MULTI_NEURON"


class PrecisionType(_StrEnum):
    """Mixed-precision modes."""

    NO = "no"
    FP8 = "fp8"
    FP16 = "fp16"
    BF16 = "bf16"


# The names ``mixed_precision`` accepts, in the order every message and menu shows them: the
# one list that the launcher, the config file, the launch variables, the commands and the
# widgets check against.
PRECISIONS: tuple[str, ...] = tuple(
    p.value for p in (PrecisionType.NO, PrecisionType.FP16, PrecisionType.BF16, PrecisionType.FP8)
)


class RNGType(_StrEnum):
    """Random number generators that can be synchronised between processes."""

    TORCH = "torch"
    CUDA = "cuda"
    MLU = "mlu"
    NPU = "npu"
    XLA = "xla"
    XPU = "xpu"
    SDAA = "sdaa"
    MUSA = "musa"
    HPU = "hpu"
    NEURON = "neuron"
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
    TRACKIO = "trackio"
    SWANLAB = "swanlab"


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
    HPU_BACKEND = "HPU_BACKEND"
    NEURON = "NEURON"


class DDPCommunicationHookType(_StrEnum):
    """DDP communication hooks (``DistributedDataParallelKwargs(comm_hook=...)``)."""

    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    POWER_SGD = "power_sgd"
    BATCHED_POWER_SGD = "batched_power_sgd"


class ComputeEnvironment(_StrEnum):
    """Where a config file says the job runs (nbaccel launches on local machines only)."""

    LOCAL_MACHINE = "LOCAL_MACHINE"
    AMAZON_SAGEMAKER = "AMAZON_SAGEMAKER"


class SageMakerDistributedType(_StrEnum):
    """SageMaker's distribution kinds, kept so config files that name them still parse."""

    NO = "NO"
    DATA_PARALLEL = "DATA_PARALLEL"
    MODEL_PARALLEL = "MODEL_PARALLEL"


class CustomDtype(_StrEnum):
    """Data types torch has no dtype for (used by size computations)."""

    FP8 = "fp8"
    INT4 = "int4"
    INT2 = "int2"
