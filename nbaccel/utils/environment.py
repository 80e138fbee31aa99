"""The module path ``accelerate.utils.environment``: the names of :mod:`nbaccel.utils` it
holds, so that ``from accelerate.utils.environment import ...`` runs with only the import
changed."""

from . import (
    are_libraries_initialized,
    clear_environment,
    convert_dict_to_env_variables,
    get_int_from_env,
    parse_choice_from_env,
    parse_flag_from_env,
    patch_environment,
    purge_accelerate_environment,
    str_to_bool,
)

__all__ = [
    "are_libraries_initialized",
    "clear_environment",
    "convert_dict_to_env_variables",
    "get_int_from_env",
    "parse_choice_from_env",
    "parse_flag_from_env",
    "patch_environment",
    "purge_accelerate_environment",
    "str_to_bool",
]
