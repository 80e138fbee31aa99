"""The module path ``accelerate.utils.random``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.random import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from ..data.rng import synchronize_rng_state
from ..data.rng import synchronize_rng_states
from ..enums import DistributedType
from ..enums import RNGType
from ..environment.availability import is_hpu_available
from ..environment.availability import is_mlu_available
from ..environment.availability import is_musa_available
from ..environment.availability import is_neuron_available
from ..environment.availability import is_npu_available
from ..environment.availability import is_sdaa_available
from ..environment.availability import is_torch_xla_available
from ..environment.availability import is_xpu_available
from ..module_paths import names_of
from ..seeding import set_seed

__all__ = names_of(__name__)
