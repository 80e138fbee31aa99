"""Accelerate's ``is_*_available`` checks: installed packages and present hardware.

None of them initialises CUDA (devices are counted through NVML or the driver's files) and none
imports the package it asks about unless the answer needs the package's own check.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import operator
import socket
import sys
from collections.abc import Callable

import torch
from packaging.version import Version

from .detect import xla_available
from .devices import cuda_device_count

__all__ = [
    "are_libraries_initialized",
    "compare_versions",
    "is_4bit_bnb_available",
    "is_8bit_bnb_available",
    "is_aim_available",
    "is_amdsmi_available",
    "is_bf16_available",
    "is_bitsandbytes_multi_backend_available",
    "is_bnb_available",
    "is_boto3_available",
    "is_clearml_available",
    "is_cuda_available",
    "is_datasets_available",
    "is_deepspeed_available",
    "is_dvclive_available",
    "is_fp8_available",
    "is_fp16_available",
    "is_habana_gaudi1",
    "is_hpu_available",
    "is_import_timer_available",
    "is_lomo_available",
    "is_matplotlib_available",
    "is_megatron_lm_available",
    "is_mlu_available",
    "is_mps_available",
    "is_msamp_available",
    "is_musa_available",
    "is_neuron_available",
    "is_npu_available",
    "is_pandas_available",
    "is_peft_available",
    "is_pippy_available",
    "is_port_in_use",
    "is_pynvml_available",
    "is_pytest_available",
    "is_rich_available",
    "is_rocm_available",
    "is_sagemaker_available",
    "is_schedulefree_available",
    "is_sdaa_available",
    "is_swanlab_available",
    "is_timm_available",
    "is_torch_version",
    "is_torch_xla_available",
    "is_torchao_available",
    "is_torchdata_available",
    "is_torchdata_stateful_dataloader_available",
    "is_torchvision_available",
    "is_trackio_available",
    "is_transformer_engine_available",
    "is_transformer_engine_mxfp8_available",
    "is_transformers_available",
    "is_triton_available",
    "is_weights_only_available",
    "is_xccl_available",
    "is_xpu_available",
    "package_available",
]

_OPERATIONS: dict[str, Callable[[Version, Version], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    "<=": operator.le,
    "<": operator.lt,
}


def package_available(module: str, distribution: str | None = None) -> bool:
    """True when ``module`` can be imported and its distribution's metadata is installed."""
    if importlib.util.find_spec(module) is None:
        return False
    try:
        importlib.metadata.version(distribution or module)
    except importlib.metadata.PackageNotFoundError:
        return distribution is None  # a module without metadata (vendored, editable): present
    return True


def compare_versions(
    library_or_version: str | Version, operation: str, requirement_version: str
) -> bool:
    """Compare an installed library's version (or a version) with ``requirement_version``."""
    if operation not in _OPERATIONS:
        raise ValueError(f"operation={operation!r} is not one of {list(_OPERATIONS)}.")
    found = library_or_version
    if isinstance(found, str):
        found = Version(importlib.metadata.version(found))
    return _OPERATIONS[operation](found, Version(requirement_version))


def is_torch_version(operation: str, version: str) -> bool:
    """Compare the installed torch's version (without a local suffix) with ``version``."""
    return compare_versions(Version(Version(torch.__version__).base_version), operation, version)


def _package_check(name: str, module: str) -> Callable[[], bool]:
    def check() -> bool:
        return package_available(module)

    check.__name__ = check.__qualname__ = name
    check.__doc__ = f"True when {module} is installed."
    return check


# The checks that only ask whether a package is installed.
is_aim_available = _package_check("is_aim_available", "aim")
is_amdsmi_available = _package_check("is_amdsmi_available", "amdsmi")
is_boto3_available = _package_check("is_boto3_available", "boto3")
is_clearml_available = _package_check("is_clearml_available", "clearml")
is_datasets_available = _package_check("is_datasets_available", "datasets")
is_deepspeed_available = _package_check("is_deepspeed_available", "deepspeed")
is_dvclive_available = _package_check("is_dvclive_available", "dvclive")
is_import_timer_available = _package_check("is_import_timer_available", "import_timer")
is_lomo_available = _package_check("is_lomo_available", "lomo_optim")
is_matplotlib_available = _package_check("is_matplotlib_available", "matplotlib")
is_megatron_lm_available = _package_check("is_megatron_lm_available", "megatron")
is_msamp_available = _package_check("is_msamp_available", "msamp")
is_pandas_available = _package_check("is_pandas_available", "pandas")
is_peft_available = _package_check("is_peft_available", "peft")
is_pynvml_available = _package_check("is_pynvml_available", "pynvml")
is_pytest_available = _package_check("is_pytest_available", "pytest")
is_rich_available = _package_check("is_rich_available", "rich")
is_sagemaker_available = _package_check("is_sagemaker_available", "sagemaker")
is_schedulefree_available = _package_check("is_schedulefree_available", "schedulefree")
is_swanlab_available = _package_check("is_swanlab_available", "swanlab")
is_timm_available = _package_check("is_timm_available", "timm")
is_torchao_available = _package_check("is_torchao_available", "torchao")
is_torchdata_available = _package_check("is_torchdata_available", "torchdata")
is_torchvision_available = _package_check("is_torchvision_available", "torchvision")
is_trackio_available = _package_check("is_trackio_available", "trackio")
is_transformer_engine_available = _package_check(
    "is_transformer_engine_available", "transformer_engine"
)
is_transformers_available = _package_check("is_transformers_available", "transformers")
is_triton_available = _package_check("is_triton_available", "triton")


def is_cuda_available() -> bool:
    """True when a CUDA device is visible (counted without initialising CUDA)."""
    return cuda_device_count() > 0


def is_rocm_available() -> bool:
    """True on a ROCm build of torch with a visible GPU."""
    return torch.version.hip is not None and is_cuda_available()


def is_mps_available(min_version: str = "1.12") -> bool:
    """True when Apple's MPS device is usable (and torch is at least ``min_version``)."""
    mps = torch.backends.mps
    return is_torch_version(">=", min_version) and mps.is_available() and mps.is_built()


def is_torch_xla_available(check_is_tpu: bool = False, check_is_gpu: bool = False) -> bool:
    """True when torch_xla is installed (and, if asked, its device is a TPU / a GPU)."""
    if check_is_tpu and check_is_gpu:
        raise ValueError("check_is_tpu and check_is_gpu cannot both be True.")
    if not xla_available():
        return False
    if not (check_is_tpu or check_is_gpu):
        return True
    # torch_xla is installed on TPU hosts only
    import torch_xla.runtime as xr

    kind = xr.device_type()
    return kind in ("GPU", "CUDA") if check_is_gpu else kind == "TPU"


def _device_module(name: str, check_device: bool) -> bool:
    module = getattr(torch, name, None)
    if module is None or not hasattr(module, "is_available"):
        return False
    if not module.is_available():
        return False
    return not check_device or module.device_count() > 0


def is_xpu_available(check_device: bool = False) -> bool:
    """True when torch has a usable Intel XPU backend (with ``check_device``: a device)."""
    return _device_module("xpu", check_device)


def is_npu_available(check_device: bool = False) -> bool:
    """True when torch_npu is installed and usable (with ``check_device``: a device)."""
    return package_available("torch_npu") and _device_module("npu", check_device)


def is_mlu_available(check_device: bool = False) -> bool:
    """True when torch_mlu is installed and usable (with ``check_device``: a device)."""
    return package_available("torch_mlu") and _device_module("mlu", check_device)


def is_sdaa_available(check_device: bool = False) -> bool:
    """True when torch_sdaa is installed and usable (with ``check_device``: a device)."""
    return package_available("torch_sdaa") and _device_module("sdaa", check_device)


def is_musa_available(check_device: bool = False) -> bool:
    """True when torch_musa is installed and usable (with ``check_device``: a device)."""
    return package_available("torch_musa") and _device_module("musa", check_device)


def is_neuron_available(check_device: bool = False) -> bool:
    """True when torch_neuronx is installed and usable (with ``check_device``: a device)."""
    return package_available("torch_neuronx") and _device_module("neuron", check_device)


def is_hpu_available(init_hccl: bool = False) -> bool:
    """True when Habana's torch bridge is installed and an HPU is usable."""
    if not package_available("habana_frameworks"):
        return False
    if init_hccl:
        # Intel Gaudi's package is there only on Gaudi machines
        import habana_frameworks.torch.distributed.hccl  # noqa: F401
    return _device_module("hpu", False)


def is_habana_gaudi1() -> bool:
    """True on a first-generation Gaudi HPU."""
    if not is_hpu_available():
        return False
    # Intel Gaudi's package is there only on Gaudi machines
    import habana_frameworks.torch.utils.experimental as htexp

    return bool(htexp._get_device_type() == htexp.synDeviceType.synDeviceGaudi)


def is_bf16_available(ignore_tpu: bool = False) -> bool:
    """True when bf16 works here (on a TPU: ``not ignore_tpu``)."""
    if xla_available() and is_torch_xla_available(check_is_tpu=True):
        return not ignore_tpu
    if is_cuda_available():
        return bool(torch.cuda.is_bf16_supported())
    return True


def is_fp16_available() -> bool:
    """True unless on a first-generation Gaudi."""
    return not is_habana_gaudi1()


def is_fp8_available() -> bool:
    """True when an fp8 backend (MS-AMP, Transformer Engine, torchao) is installed."""
    return is_msamp_available() or is_transformer_engine_available() or is_torchao_available()


def is_weights_only_available() -> bool:
    """True when ``torch.load(weights_only=True)`` takes an allow-list (torch >= 2.4)."""
    return is_torch_version(">=", "2.4.0")


def is_pippy_available() -> bool:
    """True when torch has its pipelining module (torch >= 2.4)."""
    return is_torch_version(">=", "2.4.0")


def is_xccl_available() -> bool:
    """True when torch.distributed has the XCCL backend."""
    check = getattr(torch.distributed.distributed_c10d, "is_xccl_available", None)
    return bool(check()) if check is not None else False


def is_port_in_use(port: int | None = None) -> bool:
    """True when something listens on ``port`` (29500 by default) on this machine."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("localhost", 29500 if port is None else port)) == 0


def are_libraries_initialized(*library_names: str) -> list[str]:
    """The names among ``library_names`` that are already imported."""
    return [name for name in library_names if name in sys.modules]


def is_bnb_available(min_version: str | None = None) -> bool:
    """True when bitsandbytes is installed (at least ``min_version`` when given)."""
    if not package_available("bitsandbytes"):
        return False
    return min_version is None or compare_versions("bitsandbytes", ">=", min_version)


def is_8bit_bnb_available() -> bool:
    """True when bitsandbytes with 8-bit layers (>= 0.37.2) is installed."""
    return is_bnb_available("0.37.2")


def is_4bit_bnb_available() -> bool:
    """True when bitsandbytes with 4-bit layers (>= 0.39.0) is installed."""
    return is_bnb_available("0.39.0")


def is_bitsandbytes_multi_backend_available() -> bool:
    """True when the installed bitsandbytes supports several device backends."""
    if not is_bnb_available():
        return False
    # bitsandbytes is optional: asked about, never required
    import bitsandbytes as bnb

    return "multi_backend" in getattr(bnb, "features", set())


def is_torchdata_stateful_dataloader_available() -> bool:
    """True when torchdata with ``StatefulDataLoader`` (>= 0.8.0) is installed."""
    return package_available("torchdata") and compare_versions("torchdata", ">=", "0.8.0")


def is_transformer_engine_mxfp8_available() -> bool:
    """True when Transformer Engine is installed and this GPU supports MXFP8."""
    if not package_available("transformer_engine"):
        return False
    # Transformer Engine is optional: asked about, never required
    from transformer_engine.pytorch.fp8 import check_mxfp8_support

    return bool(check_mxfp8_support()[0])
