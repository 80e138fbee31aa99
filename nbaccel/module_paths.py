"""Accelerate's module paths that nbaccel offers: the names at each path, and the module of
nbaccel where each name's code lives (its home).

A door (``nbaccel/hooks.py``, ``nbaccel/utils/memory.py``, ...) imports its names from their
homes and takes its ``__all__`` from :func:`names_of`, so that adding a name to a path is one
line here and one import there; tests/unit/test_module_paths.py checks that each door holds
exactly these imports and nothing else. Data only: it imports no other module of nbaccel.
"""

from __future__ import annotations

__all__ = ["AT_HOME", "DOORS", "UTILS_SUBMODULES", "homes", "names_of"]

# Accelerate's paths where nbaccel's own code lives at the same path (not doors).
AT_HOME: tuple[str, ...] = (
    "nbaccel.logging",
    "nbaccel.state",
    "nbaccel.test_utils",
    "nbaccel.tracking",
)

# what accelerate.utils and accelerate.utils.constants share
_CONSTANTS = """
    BETA_CP_AVAILABLE_PYTORCH_VERSION BETA_SP_AVAILABLE_DEEPSPEED_VERSION
    BETA_TP_AVAILABLE_PYTORCH_VERSION BETA_TP_AVAILABLE_TRANSFORMERS_VERSION
    MITA_PROFILING_AVAILABLE_PYTORCH_VERSION MODEL_NAME OPTIMIZER_NAME PROFILE_PATTERN_NAME
    RNG_STATE_NAME SAFE_MODEL_NAME SAFE_WEIGHTS_INDEX_NAME SAFE_WEIGHTS_NAME
    SAFE_WEIGHTS_PATTERN_NAME SAMPLER_NAME SCALER_NAME SCHEDULER_NAME
    TORCH_DISTRIBUTED_OPERATION_TYPES TORCH_LAUNCH_PARAMS WEIGHTS_INDEX_NAME WEIGHTS_NAME
    WEIGHTS_PATTERN_NAME XPU_PROFILING_AVAILABLE_PYTORCH_VERSION
"""

# Accelerate's path (spelled with nbaccel) -> home -> the names taken from there. "nbaccel" is
# the package itself, which also holds nbaccel's own launcher names and the IPython hooks.
DOORS: dict[str, dict[str, str]] = {
    "nbaccel": {
        "nbaccel.checkpoint.loading": "load_checkpoint_and_dispatch load_checkpoint_in_model",
        "nbaccel.config.files": "write_basic_config",
        "nbaccel.data.configuration": "DataLoaderConfiguration",
        "nbaccel.data.rng": "synchronize_rng_states",
        "nbaccel.data.skip": "skip_first_batches",
        "nbaccel.enums": """
            DDPCommunicationHookType DistributedType DynamoBackend LoggerType PrecisionType RNGType
        """,
        "nbaccel.environment.availability": "is_rich_available",
        "nbaccel.fsdp.plugin": "FullyShardedDataParallelPlugin",
        "nbaccel.kwargs_handlers": """
            AutocastKwargs DistributedDataParallelKwargs GradScalerKwargs InitProcessGroupKwargs
            KwargsHandler
        """,
        "nbaccel.launch.parent.errors": "StallError WorkerError",
        "nbaccel.launch.parent.notebook": "debug_launcher notebook_launcher",
        "nbaccel.launch.parent.pool": "WorkerPool",
        "nbaccel.logging": "get_logger",
        "nbaccel.memory": "find_executable_batch_size",
        "nbaccel.modeling.allocation": "infer_auto_device_map",
        "nbaccel.modeling.creation": "init_empty_weights init_on_device",
        "nbaccel.modeling.offload": "cpu_offload cpu_offload_with_hook disk_offload dispatch_model",
        "nbaccel.parallelism": "ParallelismConfig",
        "nbaccel.plugins": "GradientAccumulationPlugin ProjectConfiguration TorchDynamoPlugin",
        "nbaccel.profiling": "ProfileKwargs",
        "nbaccel.seeding": "set_seed",
        "nbaccel.state.accelerator": "AcceleratorState",
        "nbaccel.state.gradient": "GradientState",
        "nbaccel.state.partial": "PartialState",
        "nbaccel.tracking.base": "GeneralTracker",
        "nbaccel.training.accelerator": "Accelerator",
        "nbaccel.deepspeed.plugin": "DeepSpeedPlugin",
        "nbaccel.version": "__version__",
    },
    "nbaccel.accelerator": {
        "nbaccel.training.accelerator": "Accelerator",
    },
    "nbaccel.big_modeling": {
        "nbaccel.checkpoint.loading": "load_checkpoint_and_dispatch load_checkpoint_in_model",
        "nbaccel.modeling.aligning": """
            AlignDevicesHook attach_align_device_hook attach_align_device_hook_on_blocks
        """,
        "nbaccel.modeling.allocation": "infer_auto_device_map",
        "nbaccel.modeling.creation": "init_empty_weights init_on_device",
        "nbaccel.modeling.device_map": "get_balanced_memory",
        "nbaccel.modeling.hooks": """
            CpuOffload LayerwiseCastingHook UserCpuOffloadHook add_hook_to_module
            attach_layerwise_casting_hooks remove_hook_from_module
        """,
        "nbaccel.modeling.moves": "find_tied_parameters retie_parameters",
        "nbaccel.modeling.offload": "cpu_offload cpu_offload_with_hook disk_offload dispatch_model",
        "nbaccel.modeling.offload_store": "OffloadedWeightsLoader offload_state_dict",
        "nbaccel.modeling.offloaded": "get_state_dict_from_offload has_offloaded_params",
        "nbaccel.modeling.tensors": "check_device_map extract_submodules_state_dict",
    },
    "nbaccel.data_loader": {
        "nbaccel.data.dispatch": "DataLoaderDispatcher",
        "nbaccel.data.loaders": "DataLoaderShard DataLoaderStateMixin",
        "nbaccel.data.prepare": "prepare_data_loader",
        "nbaccel.data.samplers": "BatchSamplerShard SeedableRandomSampler SkipBatchSampler",
        "nbaccel.data.shards": "IterableDatasetShard",
        "nbaccel.data.skip": "SkipDataLoader skip_first_batches",
    },
    "nbaccel.hooks": {
        "nbaccel.modeling.aligning": """
            AlignDevicesHook attach_align_device_hook attach_align_device_hook_on_blocks
            attach_execution_device_hook
        """,
        "nbaccel.modeling.hooks": """
            CpuOffload LayerwiseCastingHook ModelHook SequentialHook UserCpuOffloadHook
            add_hook_to_module remove_hook_from_module remove_hook_from_submodules
        """,
    },
    "nbaccel.launchers": {
        "nbaccel.launch.parent.notebook": "debug_launcher notebook_launcher",
    },
    "nbaccel.local_sgd": {"nbaccel.training.local_sgd": "LocalSGD"},
    "nbaccel.optimizer": {
        "nbaccel.optim": "AcceleratedOptimizer",
    },
    "nbaccel.parallelism_config": {
        "nbaccel.parallelism": "ParallelismConfig",
    },
    "nbaccel.scheduler": {
        "nbaccel.optim": "AcceleratedScheduler",
    },
    "nbaccel.utils": {
        "nbaccel.checkpoint.loading": "load_checkpoint_in_model",
        "nbaccel.checkpoint.simple": "convert_file_size_to_int dtype_byte_size load save",
        "nbaccel.config.files": "write_basic_config",
        "nbaccel.constants": _CONSTANTS,
        "nbaccel.data.configuration": "DataLoaderConfiguration",
        "nbaccel.data.rng": "synchronize_rng_state synchronize_rng_states",
        "nbaccel.data.skip": "skip_first_batches",
        "nbaccel.describe": "convert_bytes get_pretty_name",
        "nbaccel.enums": """
            ComputeEnvironment CustomDtype DDPCommunicationHookType DistributedType DynamoBackend
            LoggerType PrecisionType RNGType SageMakerDistributedType
        """,
        "nbaccel.environment.availability": """
            are_libraries_initialized compare_versions is_4bit_bnb_available is_8bit_bnb_available
            is_aim_available is_amdsmi_available is_bf16_available
            is_bitsandbytes_multi_backend_available is_bnb_available is_boto3_available
            is_clearml_available is_cuda_available is_datasets_available is_deepspeed_available
            is_dvclive_available is_fp16_available is_fp8_available is_habana_gaudi1
            is_hpu_available is_import_timer_available is_lomo_available is_matplotlib_available
            is_megatron_lm_available is_mlu_available is_mps_available is_msamp_available
            is_musa_available is_neuron_available is_npu_available is_pandas_available
            is_peft_available is_pippy_available is_port_in_use is_pynvml_available
            is_pytest_available is_rich_available is_rocm_available is_sagemaker_available
            is_schedulefree_available is_sdaa_available is_swanlab_available is_timm_available
            is_torch_version is_torch_xla_available is_torchao_available is_torchdata_available
            is_torchdata_stateful_dataloader_available is_torchvision_available is_trackio_available
            is_transformer_engine_available is_transformer_engine_mxfp8_available
            is_transformers_available is_triton_available is_weights_only_available
            is_xccl_available is_xpu_available
        """,
        "nbaccel.environment.patching": """
            check_os_kernel clear_environment convert_dict_to_env_variables get_int_from_env
            parse_choice_from_env parse_flag_from_env patch_environment purge_accelerate_environment
            str_to_bool
        """,
        "nbaccel.fsdp.fsdp2": """
            fsdp2_load_full_state_dict fsdp2_prepare_auto_wrap_policy fsdp2_prepare_model
            fsdp2_switch_optimizer_parameters
        """,
        "nbaccel.fsdp.merge": "merge_fsdp_weights",
        "nbaccel.fsdp.plugin": "FullyShardedDataParallelPlugin",
        "nbaccel.fsdp.ram": "disable_fsdp_ram_efficient_loading enable_fsdp_ram_efficient_loading",
        "nbaccel.kwargs_handlers": """
            AutocastKwargs DistributedDataParallelKwargs GradScalerKwargs InitProcessGroupKwargs
            KwargsHandler
        """,
        "nbaccel.memory": "clear_device_cache find_executable_batch_size release_memory",
        "nbaccel.modeling.compiled": "compile_regions has_compiled_regions is_compiled_module",
        "nbaccel.modeling.creation": "init_empty_weights init_on_device",
        "nbaccel.modeling.moves": "find_tied_parameters retie_parameters",
        "nbaccel.modeling.allocation": "get_module_size_with_ties infer_auto_device_map",
        "nbaccel.modeling.device_map": """
            calculate_maximum_sizes clean_device_map compute_module_sizes
            compute_module_total_buffer_size get_balanced_memory get_max_layer_size get_max_memory
        """,
        "nbaccel.modeling.hooks": "SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING",
        "nbaccel.modeling.offload_store": """
            OffloadedWeightsLoader PrefixedDataset load_offloaded_weight load_offloaded_weights
            offload_state_dict offload_weight save_offload_index
        """,
        "nbaccel.modeling.offloaded": """
            align_module_device get_state_dict_from_offload get_state_dict_offloaded_model
            has_offloaded_params
        """,
        "nbaccel.modeling.tensors": """
            check_device_map check_tied_parameters_on_same_device extract_submodules_state_dict
            get_non_persistent_buffers named_module_tensors set_module_tensor_to_device
        """,
        "nbaccel.modeling.storage": "clean_state_dict_for_safetensors id_tensor_storage",
        "nbaccel.modeling.unwrap": "extract_model_from_parallel is_peft_model model_has_dtensor",
        "nbaccel.modeling.walk": "get_module_children_bottom_up recursive_getattr",
        "nbaccel.ops.collectives": """
            broadcast broadcast_object_list gather gather_object pad_across_processes reduce
        """,
        "nbaccel.ops.nested": """
            concatenate convert_to_fp32 find_batch_size find_device honor_type
            ignorant_find_batch_size is_namedtuple is_torch_tensor listify merge_dicts
            recursively_apply send_to_device slice_tensors
        """,
        "nbaccel.ops.padding_warning": "CannotPadNestedTensorWarning",
        "nbaccel.ops.structures": """
            TensorInformation convert_outputs_to_fp32 copy_tensor_to_devices get_data_structure
            initialize_tensors is_tensor_information pad_input_tensors
        """,
        "nbaccel.parallelism": """
            DeepSpeedSequenceParallelConfig ParallelismConfig TorchContextParallelConfig
            TorchTensorParallelConfig TorchTensorParallelPlugin
        """,
        "nbaccel.plugins": "GradientAccumulationPlugin ProjectConfiguration TorchDynamoPlugin",
        "nbaccel.process_control": "tqdm wait_for_everyone",
        "nbaccel.profiling": "ProfileKwargs",
        "nbaccel.seeding": "set_seed",
        "nbaccel.tracking.base": "GeneralTracker",
        "nbaccel.tracking.comet": "CometMLTracker",
        "nbaccel.tracking.jsonl": "JSONLTracker",
        "nbaccel.tracking.mlflow": "MLflowTracker",
        "nbaccel.tracking.registry": """
            is_comet_ml_available is_mlflow_available is_tensorboard_available is_wandb_available
        """,
        "nbaccel.tracking.tensorboard": "TensorBoardTracker",
        "nbaccel.tracking.wandb": "WandBTracker",
        "nbaccel.unsupported": "FP8RecipeKwargs MegatronLMPlugin",
        "nbaccel.deepspeed.dummies": "DummyOptim DummyScheduler",
        "nbaccel.deepspeed.engine": """
            DeepSpeedEngineWrapper DeepSpeedOptimizerWrapper DeepSpeedSchedulerWrapper
            get_active_deepspeed_plugin
        """,
        "nbaccel.deepspeed.hfconfig": "HfDeepSpeedConfig",
        "nbaccel.deepspeed.plugin": "DeepSpeedPlugin",
    },
}
# ``accelerate.utils``' submodules: the names each holds, each from its home in
# ``DOORS["nbaccel.utils"]`` (a name's home is written once).
UTILS_SUBMODULES: dict[str, str] = {
    "nbaccel.utils.constants": _CONSTANTS + " SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING",
    "nbaccel.utils.dataclasses": """
        AutocastKwargs ComputeEnvironment CustomDtype DDPCommunicationHookType
        DataLoaderConfiguration DeepSpeedPlugin DeepSpeedSequenceParallelConfig
        DistributedDataParallelKwargs DistributedType DynamoBackend FullyShardedDataParallelPlugin
        GradScalerKwargs GradientAccumulationPlugin InitProcessGroupKwargs KwargsHandler LoggerType
        MITA_PROFILING_AVAILABLE_PYTORCH_VERSION MegatronLMPlugin PrecisionType ProfileKwargs
        ProjectConfiguration RNGType SageMakerDistributedType TensorInformation
        TorchContextParallelConfig TorchDynamoPlugin TorchTensorParallelConfig
        TorchTensorParallelPlugin XPU_PROFILING_AVAILABLE_PYTORCH_VERSION compare_versions
        is_cuda_available is_hpu_available is_mlu_available is_msamp_available is_musa_available
        is_neuron_available is_npu_available is_rocm_available is_torch_version is_torchao_available
        is_transformer_engine_available is_xpu_available parse_flag_from_env str_to_bool
    """,
    "nbaccel.utils.deepspeed": """
        DeepSpeedEngineWrapper DeepSpeedOptimizerWrapper DeepSpeedSchedulerWrapper DummyOptim
        DummyScheduler HfDeepSpeedConfig get_active_deepspeed_plugin
    """,
    "nbaccel.utils.environment": """
        are_libraries_initialized clear_environment convert_dict_to_env_variables get_int_from_env
        parse_choice_from_env parse_flag_from_env patch_environment purge_accelerate_environment
        str_to_bool
    """,
    "nbaccel.utils.fsdp_utils": """
        OPTIMIZER_NAME SAFE_WEIGHTS_NAME WEIGHTS_NAME disable_fsdp_ram_efficient_loading
        enable_fsdp_ram_efficient_loading fsdp2_load_full_state_dict fsdp2_prepare_auto_wrap_policy
        fsdp2_prepare_model fsdp2_switch_optimizer_parameters get_module_children_bottom_up
        is_compiled_module is_peft_model is_torch_version merge_fsdp_weights save
    """,
    "nbaccel.utils.imports": """
        compare_versions is_4bit_bnb_available is_8bit_bnb_available is_aim_available
        is_amdsmi_available is_bf16_available is_bitsandbytes_multi_backend_available
        is_bnb_available is_boto3_available is_clearml_available is_comet_ml_available
        is_cuda_available is_datasets_available is_deepspeed_available is_dvclive_available
        is_fp16_available is_fp8_available is_habana_gaudi1 is_hpu_available
        is_import_timer_available is_lomo_available is_matplotlib_available is_megatron_lm_available
        is_mlflow_available is_mlu_available is_mps_available is_msamp_available is_musa_available
        is_neuron_available is_npu_available is_pandas_available is_peft_available
        is_pippy_available is_pynvml_available is_pytest_available is_rich_available
        is_rocm_available is_sagemaker_available is_schedulefree_available is_sdaa_available
        is_swanlab_available is_tensorboard_available is_timm_available is_torch_version
        is_torch_xla_available is_torchao_available is_torchdata_available
        is_torchdata_stateful_dataloader_available is_torchvision_available is_trackio_available
        is_transformer_engine_available is_transformer_engine_mxfp8_available
        is_transformers_available is_triton_available is_wandb_available is_weights_only_available
        is_xccl_available is_xpu_available parse_flag_from_env patch_environment str_to_bool
    """,
    "nbaccel.utils.memory": """
        clear_device_cache find_executable_batch_size is_cuda_available is_hpu_available
        is_mlu_available is_mps_available is_musa_available is_neuron_available is_npu_available
        is_sdaa_available is_xpu_available release_memory
    """,
    "nbaccel.utils.modeling": """
        AutocastKwargs CustomDtype DistributedType SAFE_WEIGHTS_NAME WEIGHTS_INDEX_NAME WEIGHTS_NAME
        align_module_device calculate_maximum_sizes check_device_map
        check_tied_parameters_on_same_device clean_device_map clear_device_cache
        compute_module_sizes compute_module_total_buffer_size convert_file_size_to_int
        dtype_byte_size find_tied_parameters get_balanced_memory get_max_layer_size
        get_max_memory get_module_size_with_ties get_non_persistent_buffers
        get_state_dict_from_offload get_state_dict_offloaded_model has_offloaded_params
        id_tensor_storage
        infer_auto_device_map is_hpu_available is_mlu_available is_mps_available
        is_musa_available is_npu_available is_peft_available is_peft_model is_sdaa_available
        is_torch_version is_torch_xla_available is_xpu_available load_checkpoint_in_model
        load_offloaded_weight load_offloaded_weights named_module_tensors offload_weight
        retie_parameters save_offload_index set_module_tensor_to_device tqdm
    """,
    "nbaccel.utils.offload": """
        OffloadedWeightsLoader PrefixedDataset extract_submodules_state_dict load_offloaded_weight
        offload_state_dict offload_weight save_offload_index
    """,
    "nbaccel.utils.operations": """
        CannotPadNestedTensorWarning DistributedType TORCH_DISTRIBUTED_OPERATION_TYPES
        TensorInformation broadcast broadcast_object_list concatenate convert_outputs_to_fp32
        convert_to_fp32 copy_tensor_to_devices find_batch_size find_device gather gather_object
        get_data_structure honor_type ignorant_find_batch_size initialize_tensors is_namedtuple
        is_npu_available is_tensor_information is_torch_tensor is_torch_version
        is_torch_xla_available listify pad_across_processes pad_input_tensors recursively_apply
        reduce send_to_device slice_tensors
    """,
    "nbaccel.utils.other": """
        DistributedType check_os_kernel clean_state_dict_for_safetensors compile_regions
        convert_bytes extract_model_from_parallel get_module_children_bottom_up get_pretty_name
        has_compiled_regions id_tensor_storage is_compiled_module is_deepspeed_available
        is_port_in_use is_torch_version is_torch_xla_available is_weights_only_available load
        merge_dicts model_has_dtensor recursive_getattr reduce save wait_for_everyone
        write_basic_config
    """,
    "nbaccel.utils.random": """
        DistributedType RNGType is_hpu_available is_mlu_available is_musa_available
        is_neuron_available is_npu_available is_sdaa_available is_torch_xla_available
        is_xpu_available set_seed synchronize_rng_state synchronize_rng_states
    """,
    "nbaccel.utils.versions": "compare_versions is_torch_version",
}


def homes(path: str) -> dict[str, str]:
    """Name -> home module, for every name that ``path`` offers."""
    if path in UTILS_SUBMODULES:
        utils = homes("nbaccel.utils")
        return {name: utils[name] for name in UTILS_SUBMODULES[path].split()}
    return {name: home for home, names in DOORS[path].items() for name in names.split()}


def names_of(path: str) -> list[str]:
    """``path``'s ``__all__``: the names it offers, sorted."""
    return sorted(homes(path))
