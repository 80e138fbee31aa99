"""The module path ``accelerate.utils.modeling``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.modeling import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from ..checkpoint.loading import load_checkpoint_in_model
from ..checkpoint.simple import convert_file_size_to_int
from ..checkpoint.simple import dtype_byte_size
from ..constants import SAFE_WEIGHTS_NAME
from ..constants import WEIGHTS_INDEX_NAME
from ..constants import WEIGHTS_NAME
from ..enums import CustomDtype
from ..enums import DistributedType
from ..environment.availability import is_hpu_available
from ..environment.availability import is_mlu_available
from ..environment.availability import is_mps_available
from ..environment.availability import is_musa_available
from ..environment.availability import is_npu_available
from ..environment.availability import is_peft_available
from ..environment.availability import is_sdaa_available
from ..environment.availability import is_torch_version
from ..environment.availability import is_torch_xla_available
from ..environment.availability import is_xpu_available
from ..kwargs_handlers import AutocastKwargs
from ..memory import clear_device_cache
from ..modeling.allocation import get_module_size_with_ties
from ..modeling.allocation import infer_auto_device_map
from ..modeling.device_map import calculate_maximum_sizes
from ..modeling.device_map import clean_device_map
from ..modeling.device_map import compute_module_sizes
from ..modeling.device_map import compute_module_total_buffer_size
from ..modeling.device_map import get_balanced_memory
from ..modeling.device_map import get_max_layer_size
from ..modeling.device_map import get_max_memory
from ..modeling.moves import find_tied_parameters
from ..modeling.moves import retie_parameters
from ..modeling.offload_store import load_offloaded_weight
from ..modeling.offload_store import load_offloaded_weights
from ..modeling.offload_store import offload_weight
from ..modeling.offload_store import save_offload_index
from ..modeling.offloaded import align_module_device
from ..modeling.offloaded import get_state_dict_from_offload
from ..modeling.offloaded import get_state_dict_offloaded_model
from ..modeling.offloaded import has_offloaded_params
from ..modeling.storage import id_tensor_storage
from ..modeling.tensors import check_device_map
from ..modeling.tensors import check_tied_parameters_on_same_device
from ..modeling.tensors import get_non_persistent_buffers
from ..modeling.tensors import named_module_tensors
from ..modeling.tensors import set_module_tensor_to_device
from ..modeling.unwrap import is_peft_model
from ..module_paths import names_of
from ..process_control import tqdm

__all__ = names_of(__name__)
