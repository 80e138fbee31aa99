"""The module path ``accelerate.utils.fsdp_utils``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.fsdp_utils import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from ..checkpoint.simple import save
from ..constants import OPTIMIZER_NAME
from ..constants import SAFE_WEIGHTS_NAME
from ..constants import WEIGHTS_NAME
from ..environment.availability import is_torch_version
from ..fsdp.fsdp2 import fsdp2_load_full_state_dict
from ..fsdp.fsdp2 import fsdp2_prepare_auto_wrap_policy
from ..fsdp.fsdp2 import fsdp2_prepare_model
from ..fsdp.fsdp2 import fsdp2_switch_optimizer_parameters
from ..fsdp.merge import merge_fsdp_weights
from ..fsdp.ram import disable_fsdp_ram_efficient_loading
from ..fsdp.ram import enable_fsdp_ram_efficient_loading
from ..modeling.compiled import is_compiled_module
from ..modeling.unwrap import is_peft_model
from ..modeling.walk import get_module_children_bottom_up
from ..module_paths import names_of

__all__ = names_of(__name__)
