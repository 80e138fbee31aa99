"""The module path ``accelerate.utils.environment``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.environment import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports, one line per name and home; __all__ comes from
# nbaccel.module_paths)

from ..environment.availability import are_libraries_initialized
from ..environment.patching import clear_environment
from ..environment.patching import convert_dict_to_env_variables
from ..environment.patching import get_int_from_env
from ..environment.patching import parse_choice_from_env
from ..environment.patching import parse_flag_from_env
from ..environment.patching import patch_environment
from ..environment.patching import purge_accelerate_environment
from ..environment.patching import str_to_bool
from ..module_paths import names_of

__all__ = names_of(__name__)
