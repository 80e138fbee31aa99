"""The module path ``accelerate.utils.offload``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.offload import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from ..modeling.offload_store import OffloadedWeightsLoader
from ..modeling.offload_store import PrefixedDataset
from ..modeling.offload_store import load_offloaded_weight
from ..modeling.offload_store import offload_state_dict
from ..modeling.offload_store import offload_weight
from ..modeling.offload_store import save_offload_index
from ..modeling.tensors import extract_submodules_state_dict
from ..module_paths import names_of

__all__ = names_of(__name__)
