"""The module path ``accelerate.utils.modeling``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.modeling import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports: __all__ comes from nbaccel.module_paths)

from ..checkpoint.export import load_checkpoint_in_model
from ..checkpoint.simple import convert_file_size_to_int, dtype_byte_size
from ..constants import SAFE_WEIGHTS_NAME, WEIGHTS_INDEX_NAME, WEIGHTS_NAME
from ..enums import CustomDtype, DistributedType
from ..environment.availability import (
    is_hpu_available,
    is_mlu_available,
    is_mps_available,
    is_musa_available,
    is_npu_available,
    is_peft_available,
    is_sdaa_available,
    is_torch_version,
    is_torch_xla_available,
    is_xpu_available,
)
from ..kwargs_handlers import AutocastKwargs
from ..memory import clear_device_cache
from ..modeling.moves import find_tied_parameters, retie_parameters
from ..modeling.offload import (
    get_state_dict_from_offload,
    has_offloaded_params,
    infer_auto_device_map,
)
from ..modeling.storage import id_tensor_storage
from ..modeling.unwrap import is_peft_model
from ..module_paths import names_of
from ..process_control import tqdm

__all__ = names_of(__name__)
