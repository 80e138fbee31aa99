"""The module path ``accelerate.utils.environment``: the names of ``accelerate.utils`` it holds,
so that ``from accelerate.utils.environment import ...`` runs with only the import changed."""

# ruff: noqa: F401  (re-exports: __all__ comes from nbaccel.module_paths)

from ..environment.availability import are_libraries_initialized
from ..environment.patching import (
    clear_environment,
    convert_dict_to_env_variables,
    get_int_from_env,
    parse_choice_from_env,
    parse_flag_from_env,
    patch_environment,
    purge_accelerate_environment,
    str_to_bool,
)
from ..module_paths import names_of

__all__ = names_of(__name__)
