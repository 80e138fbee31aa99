"""The module path ``accelerate.utils``: the names user code imports from it, each from its
home in nbaccel (:mod:`nbaccel.module_paths` lists them)."""

# ruff: noqa: F401  (re-exports: __all__ comes from nbaccel.module_paths)

from ..checkpoint.export import load_checkpoint_in_model
from ..checkpoint.simple import convert_file_size_to_int, dtype_byte_size, load, save
from ..config.files import write_basic_config
from ..constants import (
    BETA_CP_AVAILABLE_PYTORCH_VERSION,
    BETA_SP_AVAILABLE_DEEPSPEED_VERSION,
    BETA_TP_AVAILABLE_PYTORCH_VERSION,
    BETA_TP_AVAILABLE_TRANSFORMERS_VERSION,
    MITA_PROFILING_AVAILABLE_PYTORCH_VERSION,
    MODEL_NAME,
    OPTIMIZER_NAME,
    PROFILE_PATTERN_NAME,
    RNG_STATE_NAME,
    SAFE_MODEL_NAME,
    SAFE_WEIGHTS_INDEX_NAME,
    SAFE_WEIGHTS_NAME,
    SAFE_WEIGHTS_PATTERN_NAME,
    SAMPLER_NAME,
    SCALER_NAME,
    SCHEDULER_NAME,
    TORCH_DISTRIBUTED_OPERATION_TYPES,
    TORCH_LAUNCH_PARAMS,
    WEIGHTS_INDEX_NAME,
    WEIGHTS_NAME,
    WEIGHTS_PATTERN_NAME,
    XPU_PROFILING_AVAILABLE_PYTORCH_VERSION,
)
from ..data.configuration import DataLoaderConfiguration
from ..data.rng import synchronize_rng_state, synchronize_rng_states
from ..data.skip import skip_first_batches
from ..describe import convert_bytes, get_pretty_name
from ..enums import (
    ComputeEnvironment,
    CustomDtype,
    DDPCommunicationHookType,
    DistributedType,
    DynamoBackend,
    LoggerType,
    PrecisionType,
    RNGType,
    SageMakerDistributedType,
)
from ..environment.availability import (
    are_libraries_initialized,
    compare_versions,
    is_4bit_bnb_available,
    is_8bit_bnb_available,
    is_aim_available,
    is_amdsmi_available,
    is_bf16_available,
    is_bitsandbytes_multi_backend_available,
    is_bnb_available,
    is_boto3_available,
    is_clearml_available,
    is_cuda_available,
    is_datasets_available,
    is_deepspeed_available,
    is_dvclive_available,
    is_fp8_available,
    is_fp16_available,
    is_habana_gaudi1,
    is_hpu_available,
    is_import_timer_available,
    is_lomo_available,
    is_matplotlib_available,
    is_megatron_lm_available,
    is_mlu_available,
    is_mps_available,
    is_msamp_available,
    is_musa_available,
    is_neuron_available,
    is_npu_available,
    is_pandas_available,
    is_peft_available,
    is_pippy_available,
    is_port_in_use,
    is_pynvml_available,
    is_pytest_available,
    is_rich_available,
    is_rocm_available,
    is_sagemaker_available,
    is_schedulefree_available,
    is_sdaa_available,
    is_swanlab_available,
    is_timm_available,
    is_torch_version,
    is_torch_xla_available,
    is_torchao_available,
    is_torchdata_available,
    is_torchdata_stateful_dataloader_available,
    is_torchvision_available,
    is_trackio_available,
    is_transformer_engine_available,
    is_transformer_engine_mxfp8_available,
    is_transformers_available,
    is_triton_available,
    is_weights_only_available,
    is_xccl_available,
    is_xpu_available,
)
from ..environment.patching import (
    check_os_kernel,
    clear_environment,
    convert_dict_to_env_variables,
    get_int_from_env,
    parse_choice_from_env,
    parse_flag_from_env,
    patch_environment,
    purge_accelerate_environment,
    str_to_bool,
)
from ..fsdp.fsdp2 import (
    fsdp2_load_full_state_dict,
    fsdp2_prepare_auto_wrap_policy,
    fsdp2_prepare_model,
    fsdp2_switch_optimizer_parameters,
)
from ..fsdp.merge import merge_fsdp_weights
from ..fsdp.plugin import FullyShardedDataParallelPlugin
from ..fsdp.ram import disable_fsdp_ram_efficient_loading, enable_fsdp_ram_efficient_loading
from ..kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
)
from ..memory import clear_device_cache, find_executable_batch_size, release_memory
from ..modeling.compiled import compile_regions, has_compiled_regions, is_compiled_module
from ..modeling.creation import init_empty_weights, init_on_device
from ..modeling.moves import find_tied_parameters, retie_parameters
from ..modeling.offload import (
    get_state_dict_from_offload,
    has_offloaded_params,
    infer_auto_device_map,
)
from ..modeling.storage import clean_state_dict_for_safetensors, id_tensor_storage
from ..modeling.unwrap import extract_model_from_parallel, is_peft_model, model_has_dtensor
from ..modeling.walk import get_module_children_bottom_up, recursive_getattr
from ..module_paths import names_of
from ..ops.collectives import (
    broadcast,
    broadcast_object_list,
    gather,
    gather_object,
    pad_across_processes,
    reduce,
)
from ..ops.nested import (
    concatenate,
    convert_to_fp32,
    find_batch_size,
    find_device,
    honor_type,
    ignorant_find_batch_size,
    is_namedtuple,
    is_torch_tensor,
    listify,
    merge_dicts,
    recursively_apply,
    send_to_device,
    slice_tensors,
)
from ..ops.padding_warning import CannotPadNestedTensorWarning
from ..ops.structures import (
    TensorInformation,
    convert_outputs_to_fp32,
    copy_tensor_to_devices,
    get_data_structure,
    initialize_tensors,
    is_tensor_information,
    pad_input_tensors,
)
from ..parallelism import (
    DeepSpeedSequenceParallelConfig,
    ParallelismConfig,
    TorchContextParallelConfig,
    TorchTensorParallelConfig,
    TorchTensorParallelPlugin,
)
from ..plugins import GradientAccumulationPlugin, ProjectConfiguration, TorchDynamoPlugin
from ..process_control import tqdm, wait_for_everyone
from ..profiling import ProfileKwargs
from ..seeding import set_seed
from ..tracking.base import GeneralTracker
from ..tracking.comet import CometMLTracker
from ..tracking.jsonl import JSONLTracker
from ..tracking.mlflow import MLflowTracker
from ..tracking.registry import (
    is_comet_ml_available,
    is_mlflow_available,
    is_tensorboard_available,
    is_wandb_available,
)
from ..tracking.tensorboard import TensorBoardTracker
from ..tracking.wandb import WandBTracker
from ..unsupported import DeepSpeedPlugin, FP8RecipeKwargs, MegatronLMPlugin

__all__ = names_of(__name__)
