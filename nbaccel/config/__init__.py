"""The config file (YAML): schema, reading and writing, and the one precedence rule.

Explicit argument > config file > default, for ``nbaccel launch``, ``notebook_launcher``
and ``Accelerator()`` alike. See ``docs/cli.md`` for every key.
"""

from .deepspeed import DeepSpeedConfig
from .files import (
    ConfigKeysIgnoredWarning,
    LoadedConfig,
    basic_config,
    config_in_force,
    config_location,
    load_config_file,
    save_config_file,
    write_basic_config,
    write_location,
)
from .fsdp import FsdpConfig, convert_to_fsdp2
from .resolve import (
    ResolvedLaunch,
    configured_accumulation_steps,
    configured_precision,
    launcher_defaults,
    resolve_launch,
)
from .schema import ConfigFile, field_help, parse_mapping
from .values import ConfigError, ValueProblem

__all__ = [
    "ConfigError",
    "ConfigFile",
    "ConfigKeysIgnoredWarning",
    "DeepSpeedConfig",
    "FsdpConfig",
    "LoadedConfig",
    "ResolvedLaunch",
    "ValueProblem",
    "basic_config",
    "config_in_force",
    "config_location",
    "configured_accumulation_steps",
    "configured_precision",
    "convert_to_fsdp2",
    "field_help",
    "launcher_defaults",
    "load_config_file",
    "parse_mapping",
    "resolve_launch",
    "save_config_file",
    "write_basic_config",
    "write_location",
]
