"""The module path ``accelerate.utils.memory``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.memory import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from ..environment.availability import is_cuda_available
from ..environment.availability import is_hpu_available
from ..environment.availability import is_mlu_available
from ..environment.availability import is_mps_available
from ..environment.availability import is_musa_available
from ..environment.availability import is_neuron_available
from ..environment.availability import is_npu_available
from ..environment.availability import is_sdaa_available
from ..environment.availability import is_xpu_available
from ..memory import clear_device_cache
from ..memory import find_executable_batch_size
from ..memory import release_memory
from ..module_paths import names_of

__all__ = names_of(__name__)
