"""The ``require_*`` decorators of Accelerate's testing helpers, answered by nbaccel's checks.

Each one skips the test it decorates (a function or a ``unittest.TestCase`` class) unless the
machine has what the name says. Hardware comes from nbaccel's device choice
(:data:`~nbaccel.test_utils.requirements.torch_device`, ``device_count``); libraries from the
``is_*_available`` checks of :mod:`nbaccel.utils`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch

import nbaccel.utils.imports as u

from .requirements import _torch_count, device_count, requirement, torch_device

__all__ = [
    "require_aim", "require_bnb", "require_clearml", "require_comet_ml", "require_cpu",
    "require_cuda", "require_cuda_or_hpu", "require_cuda_or_xpu", "require_datasets",
    "require_deepspeed", "require_dvclive", "require_fp8", "require_fp16", "require_fsdp2",
    "require_huggingface_suite", "require_import_timer", "require_matplotlib", "require_mlflow",
    "require_mlu", "require_mps", "require_multi_device", "require_multi_gpu",
    "require_multi_gpu_or_xpu", "require_multi_xpu", "require_musa", "require_neuron",
    "require_non_cpu", "require_non_hpu", "require_non_torch_xla", "require_non_xpu",
    "require_npu", "require_pandas", "require_peft", "require_pippy", "require_schedulefree",
    "require_sdaa", "require_single_device", "require_single_gpu", "require_single_xpu",
    "require_swanlab", "require_tensorboard", "require_timm", "require_torch_min_version",
    "require_torchao", "require_torchdata_stateful_dataloader", "require_torchvision",
    "require_tp", "require_tpu", "require_trackers", "require_trackio",
    "require_transformer_engine", "require_transformer_engine_mxfp8", "require_transformers",
    "require_triton", "require_wandb", "require_xpu",
]  # fmt: skip


def _cuda() -> bool:
    return u.is_cuda_available() and not u.is_torch_xla_available()


def _fp8() -> bool:
    """An fp8 library is installed and, on an NVIDIA GPU, the GPU computes in fp8 (sm_89+)."""
    if not u.is_fp8_available():
        return False
    if u.is_cuda_available() and torch.cuda.get_device_capability() < (8, 9):
        return False
    return not (u.is_hpu_available() and u.is_habana_gaudi1())


def _tp() -> bool:
    if not (u.is_transformers_available() and u.is_torch_version(">=", "2.3.0")):
        return False
    return u.compare_versions("transformers", ">=", "4.52.0")


def _trackers() -> bool:
    """A tracker library that logs without an account is installed, and comet_ml is not."""
    found = (u.is_wandb_available, u.is_tensorboard_available, u.is_trackio_available)
    return any(f() for f in (*found, u.is_swanlab_available)) and not u.is_comet_ml_available()


# Hardware, from nbaccel's device choice.
require_cpu = requirement(torch_device == "cpu", "only a CPU (it is skipped where a GPU is used)")
require_non_cpu = requirement(torch_device != "cpu", "a hardware accelerator (GPU, TPU, ...)")
require_cuda = requirement(_cuda, "a CUDA GPU (without torch_xla)")
require_cuda_or_hpu = requirement(lambda: _cuda() or u.is_hpu_available(), "a CUDA GPU or an HPU")
require_cuda_or_xpu = requirement(lambda: _cuda() or u.is_xpu_available(), "a CUDA GPU or an XPU")
require_xpu = requirement(u.is_xpu_available, "an Intel XPU")
require_non_xpu = requirement(torch_device != "xpu", "a device other than an XPU")
require_non_hpu = requirement(torch_device != "hpu", "a device other than an HPU")
require_mlu = requirement(u.is_mlu_available, "an MLU")
require_sdaa = requirement(u.is_sdaa_available, "an SDAA")
require_musa = requirement(u.is_musa_available, "a MUSA device")
require_npu = requirement(u.is_npu_available, "an Ascend NPU")
require_neuron = requirement(u.is_neuron_available, "AWS Neuron cores")
require_mps = requirement(u.is_mps_available, "Apple's MPS backend")
require_tpu = requirement(lambda: u.is_torch_xla_available(check_is_tpu=True), "a TPU")
require_non_torch_xla = requirement(lambda: not u.is_torch_xla_available(), "no torch_xla")
require_single_device = requirement(
    torch_device != "cpu" and device_count == 1, "exactly one hardware accelerator"
)
require_single_gpu = requirement(lambda: u.is_cuda_available() and device_count == 1, "one GPU")
require_single_xpu = requirement(lambda: _torch_count("xpu") == 1, "exactly one XPU")
require_multi_device = requirement(device_count > 1, "several hardware accelerators")
require_multi_gpu = requirement(lambda: u.is_cuda_available() and device_count > 1, "2+ GPUs")
require_multi_xpu = requirement(lambda: _torch_count("xpu") > 1, "several XPUs")
require_multi_gpu_or_xpu = requirement(
    lambda: (u.is_cuda_available() or u.is_xpu_available()) and device_count > 1,
    "several GPUs or XPUs",
)

# Precision and torch features.
require_fp16 = requirement(u.is_fp16_available, "fp16 support")
require_fp8 = requirement(_fp8, "fp8 support (a library and a device that computes in fp8)")
require_fsdp2 = requirement(lambda: u.is_torch_version(">=", "2.5.0"), "FSDP2 (torch >= 2.5)")
require_tp = requirement(_tp, "tensor parallelism (torch >= 2.3 and transformers >= 4.52)")
require_pippy = requirement(
    lambda: u.is_pippy_available() and not u.is_habana_gaudi1(), "torch's pipelining (pippy)"
)


def require_torch_min_version(test_case: Any = None, version: str | None = None) -> Any:
    """Skip the test unless torch is at least ``version``.

    Use as ``@require_torch_min_version(version="2.4.0")`` (or pass ``test_case`` directly).
    """
    if version is None:
        raise TypeError("require_torch_min_version needs version=, e.g. version='2.4.0'.")
    if test_case is None:
        return partial(require_torch_min_version, version=version)
    holds = u.is_torch_version(">=", version)
    return requirement(holds, f"torch >= {version}")(test_case)


# Libraries.
require_huggingface_suite = requirement(
    lambda: u.is_transformers_available() and u.is_datasets_available(),
    "the Hugging Face suite (transformers and datasets)",
)
require_transformers = requirement(u.is_transformers_available, "transformers")
require_datasets = requirement(u.is_datasets_available, "datasets")
require_peft = requirement(u.is_peft_available, "peft")
require_timm = requirement(u.is_timm_available, "timm")
require_torchvision = requirement(u.is_torchvision_available, "torchvision")
require_triton = requirement(u.is_triton_available, "triton")
require_schedulefree = requirement(u.is_schedulefree_available, "schedulefree")
require_bnb = requirement(u.is_bnb_available, "bitsandbytes")
require_deepspeed = requirement(u.is_deepspeed_available, "DeepSpeed")
require_torchao = requirement(u.is_torchao_available, "torchao")
require_transformer_engine = requirement(u.is_transformer_engine_available, "Transformer Engine")
require_transformer_engine_mxfp8 = requirement(
    u.is_transformer_engine_mxfp8_available, "Transformer Engine with MXFP8 block scaling"
)
require_import_timer = requirement(u.is_import_timer_available, "the import timer (tuna)")
require_matplotlib = requirement(u.is_matplotlib_available, "matplotlib")
require_pandas = requirement(u.is_pandas_available, "pandas")
require_torchdata_stateful_dataloader = requirement(
    u.is_torchdata_stateful_dataloader_available, "torchdata's StatefulDataLoader"
)

# Trackers.
require_tensorboard = requirement(u.is_tensorboard_available, "TensorBoard")
require_wandb = requirement(u.is_wandb_available, "wandb")
require_mlflow = requirement(u.is_mlflow_available, "MLflow")
require_comet_ml = requirement(u.is_comet_ml_available, "comet_ml")
require_aim = requirement(u.is_aim_available, "aim")
require_clearml = requirement(u.is_clearml_available, "ClearML")
require_dvclive = requirement(u.is_dvclive_available, "DVCLive")
require_swanlab = requirement(u.is_swanlab_available, "SwanLab")
require_trackio = requirement(u.is_trackio_available, "trackio")
require_trackers: Callable[[Any], Any] = requirement(
    _trackers, "a tracker library (wandb, TensorBoard, trackio or SwanLab) and no comet_ml"
)
