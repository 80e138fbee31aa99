"""The module path ``accelerate.utils.modeling``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.modeling import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from ..checkpoint.export import load_checkpoint_in_model
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
from ..modeling.moves import find_tied_parameters
from ..modeling.moves import retie_parameters
from ..modeling.offload import get_state_dict_from_offload
from ..modeling.offload import has_offloaded_params
from ..modeling.offload import infer_auto_device_map
from ..modeling.storage import id_tensor_storage
from ..modeling.unwrap import is_peft_model
from ..module_paths import names_of
from ..process_control import tqdm

__all__ = names_of(__name__)
