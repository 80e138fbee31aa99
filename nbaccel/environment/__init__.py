"""The only place that reads launch environment variables and detects the platform.

Everything nbaccel knows about how the current process was started (by ``torchrun``,
``torch.distributed.launch --use-env``, ``mpirun``, nbaccel's own launchers, or not at all)
comes from :func:`read_launch_environment`. Choosing the device and the process-group backend
happens in :func:`choose_device`, which never initialises CUDA: devices are counted through
NVML or the driver's device files, never through the CUDA runtime.

Launchers write the variables through :func:`launch_variables`, so the names live here only.
"""

from __future__ import annotations

from .allocator import (
    MALLOC_TUNING_VARIABLE,
    MMAP_THRESHOLD,
    TRIM_THRESHOLD,
    MallocChoice,
    malloc_variables,
    read_malloc_choice,
)
from .deepspeed import (
    choose_deepspeed_accelerator,
    deepspeed_launch_variables,
    deepspeed_launched,
    deepspeed_ops_folder,
    deepspeed_shm_buffer,
    read_deepspeed_launch,
)
from .detect import (
    in_colab,
    in_kaggle,
    in_notebook,
    tpu_requested,
    xla_available,
    xla_bf16_storage_requested,
    xla_device_name,
    xla_requested,
    xla_topology,
)
from .devices import DeviceChoice, choose_device, cuda_device_count, hardware_description
from .fsdp import fsdp_launch_variables, read_fsdp_launch
from .launch import (
    LaunchEnvironment,
    choice_variables,
    debug_mode_requested,
    launch_variables,
    log_level_requested,
    precision_warned_variables,
    read_launch_environment,
    store_prefix_variables,
    user_thread_count,
)
from .memory import gpu_memory, process_rss
from .precision import (
    FP16_DEVICE_TYPES,
    fp16_fallback_warning,
    fp16_unavailable_note,
    precision_in_effect,
)
from .settings import (
    CONFIG_FILE_VARIABLE,
    COPIED_TO_HOSTS,
    accelerate_config_candidates,
    config_file_override,
    environment_for_child,
    fsdp_ram_efficient_loading_enabled,
    gloo_socket_interface,
    nbaccel_default_config_path,
    ray_address,
    sanity_fail_rank,
    set_config_file_override,
    set_fsdp_ram_efficient_loading,
    slurm_allocation,
    ssh_server_address,
    variables_for_hosts,
)

__all__ = [
    "CONFIG_FILE_VARIABLE",
    "COPIED_TO_HOSTS",
    "FP16_DEVICE_TYPES",
    "MALLOC_TUNING_VARIABLE",
    "MMAP_THRESHOLD",
    "TRIM_THRESHOLD",
    "DeviceChoice",
    "LaunchEnvironment",
    "MallocChoice",
    "accelerate_config_candidates",
    "choice_variables",
    "choose_deepspeed_accelerator",
    "choose_device",
    "config_file_override",
    "cuda_device_count",
    "debug_mode_requested",
    "deepspeed_launch_variables",
    "deepspeed_launched",
    "deepspeed_ops_folder",
    "deepspeed_shm_buffer",
    "environment_for_child",
    "fp16_fallback_warning",
    "fp16_unavailable_note",
    "fsdp_launch_variables",
    "fsdp_ram_efficient_loading_enabled",
    "gloo_socket_interface",
    "gpu_memory",
    "hardware_description",
    "in_colab",
    "in_kaggle",
    "in_notebook",
    "launch_variables",
    "log_level_requested",
    "malloc_variables",
    "nbaccel_default_config_path",
    "precision_in_effect",
    "precision_warned_variables",
    "process_rss",
    "ray_address",
    "read_deepspeed_launch",
    "read_fsdp_launch",
    "read_launch_environment",
    "read_malloc_choice",
    "sanity_fail_rank",
    "set_config_file_override",
    "set_fsdp_ram_efficient_loading",
    "slurm_allocation",
    "ssh_server_address",
    "store_prefix_variables",
    "tpu_requested",
    "user_thread_count",
    "variables_for_hosts",
    "xla_available",
    "xla_bf16_storage_requested",
    "xla_device_name",
    "xla_requested",
    "xla_topology",
]
