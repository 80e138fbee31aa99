"""The module path ``accelerate.utils.imports``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.imports import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from ..environment.availability import compare_versions
from ..environment.availability import is_4bit_bnb_available
from ..environment.availability import is_8bit_bnb_available
from ..environment.availability import is_aim_available
from ..environment.availability import is_amdsmi_available
from ..environment.availability import is_bf16_available
from ..environment.availability import is_bitsandbytes_multi_backend_available
from ..environment.availability import is_bnb_available
from ..environment.availability import is_boto3_available
from ..environment.availability import is_clearml_available
from ..environment.availability import is_cuda_available
from ..environment.availability import is_datasets_available
from ..environment.availability import is_deepspeed_available
from ..environment.availability import is_dvclive_available
from ..environment.availability import is_fp8_available
from ..environment.availability import is_fp16_available
from ..environment.availability import is_habana_gaudi1
from ..environment.availability import is_hpu_available
from ..environment.availability import is_import_timer_available
from ..environment.availability import is_lomo_available
from ..environment.availability import is_matplotlib_available
from ..environment.availability import is_megatron_lm_available
from ..environment.availability import is_mlu_available
from ..environment.availability import is_mps_available
from ..environment.availability import is_msamp_available
from ..environment.availability import is_musa_available
from ..environment.availability import is_neuron_available
from ..environment.availability import is_npu_available
from ..environment.availability import is_pandas_available
from ..environment.availability import is_peft_available
from ..environment.availability import is_pippy_available
from ..environment.availability import is_pynvml_available
from ..environment.availability import is_pytest_available
from ..environment.availability import is_rich_available
from ..environment.availability import is_rocm_available
from ..environment.availability import is_sagemaker_available
from ..environment.availability import is_schedulefree_available
from ..environment.availability import is_sdaa_available
from ..environment.availability import is_swanlab_available
from ..environment.availability import is_timm_available
from ..environment.availability import is_torch_version
from ..environment.availability import is_torch_xla_available
from ..environment.availability import is_torchao_available
from ..environment.availability import is_torchdata_available
from ..environment.availability import is_torchdata_stateful_dataloader_available
from ..environment.availability import is_torchvision_available
from ..environment.availability import is_trackio_available
from ..environment.availability import is_transformer_engine_available
from ..environment.availability import is_transformer_engine_mxfp8_available
from ..environment.availability import is_transformers_available
from ..environment.availability import is_triton_available
from ..environment.availability import is_weights_only_available
from ..environment.availability import is_xccl_available
from ..environment.availability import is_xpu_available
from ..environment.patching import parse_flag_from_env
from ..environment.patching import patch_environment
from ..environment.patching import str_to_bool
from ..module_paths import names_of
from ..tracking.registry import is_comet_ml_available
from ..tracking.registry import is_mlflow_available
from ..tracking.registry import is_tensorboard_available
from ..tracking.registry import is_wandb_available

__all__ = names_of(__name__)
