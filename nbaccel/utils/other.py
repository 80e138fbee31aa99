"""The module path ``accelerate.utils.other``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.other import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from ..checkpoint.simple import load
from ..checkpoint.simple import save
from ..config.files import write_basic_config
from ..describe import convert_bytes
from ..describe import get_pretty_name
from ..enums import DistributedType
from ..environment.availability import is_deepspeed_available
from ..environment.availability import is_port_in_use
from ..environment.availability import is_torch_version
from ..environment.availability import is_torch_xla_available
from ..environment.availability import is_weights_only_available
from ..environment.patching import check_os_kernel
from ..modeling.compiled import compile_regions
from ..modeling.compiled import has_compiled_regions
from ..modeling.compiled import is_compiled_module
from ..modeling.storage import clean_state_dict_for_safetensors
from ..modeling.storage import id_tensor_storage
from ..modeling.unwrap import extract_model_from_parallel
from ..modeling.unwrap import model_has_dtensor
from ..modeling.walk import get_module_children_bottom_up
from ..modeling.walk import recursive_getattr
from ..module_paths import names_of
from ..ops.collectives import reduce
from ..ops.nested import merge_dicts
from ..process_control import wait_for_everyone

__all__ = names_of(__name__)
