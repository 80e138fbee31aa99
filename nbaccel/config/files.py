"""Reading and writing config files, where they live, and ``write_basic_config``.

The config in force is, first found: the ``config_file`` argument (``--config_file``), the
file named by ``NBACCEL_CONFIG_FILE``, ``~/.cache/nbaccel/default_config.yaml``, and, when
that is absent, Accelerate's default file (``~/.cache/huggingface/accelerate/...``).
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import yaml

from ..environment import (
    accelerate_config_candidates,
    config_file_override,
    cuda_device_count,
    nbaccel_default_config_path,
)
from .schema import PRECISIONS, ConfigFile, parse_mapping
from .values import ConfigError, ValueProblem

__all__ = [
    "ConfigKeysIgnoredWarning",
    "LoadedConfig",
    "basic_config",
    "config_in_force",
    "config_location",
    "load_config_file",
    "save_config_file",
    "write_basic_config",
    "write_location",
]


class ConfigKeysIgnoredWarning(UserWarning):
    """A config file has keys (from Accelerate) that nbaccel accepts but does not act on."""


@dataclasses.dataclass(frozen=True)
class LoadedConfig:
    """A config file that was read and validated.

    Attributes:
        path: the file.
        origin: how it was found (``--config_file``, ``NBACCEL_CONFIG_FILE``,
            ``nbaccel default``, ``Accelerate default``).
        config: its settings.
        ignored: keys that were accepted but are not acted on.
        keys: the keys the file sets (the others took their defaults).
    """

    path: Path
    origin: str
    config: ConfigFile
    ignored: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()


def _warn(message: str) -> None:
    # The warnings machinery shows each distinct message once per process.
    warnings.warn(message, ConfigKeysIgnoredWarning, stacklevel=4)


def load_config_file(
    path: str | Path, origin: str = "file", report: Callable[[str], None] | None = _warn
) -> LoadedConfig:
    """Read and validate one config file (YAML, or Accelerate's older JSON).

    Args:
        path: the file.
        origin: how the file was found (shown by ``nbaccel config show`` and ``nbaccel env``).
        report: called once with a message naming the keys accepted but not acted on.

    Raises:
        ConfigError: the file is missing or unreadable, a key is unknown (the message names
            the key that was probably meant), a value is bad, or the file asks for something
            nbaccel does not support (``distributed_type: MEGATRON_LM``).
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"{file}: no such config file (from {origin}).")
    try:
        data = yaml.safe_load(file.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{file}: cannot read it as YAML: {exc}") from None
    try:
        config, ignored = parse_mapping(data)
    except ValueProblem as problem:
        raise problem.error(str(file)) from None
    if ignored and report is not None:
        report(
            f"nbaccel: {file}: accepted but not acted on by nbaccel: {', '.join(ignored)} "
            "(kept in the file; see docs/cli.md)."
        )
    names = {field.name for field in dataclasses.fields(ConfigFile)}
    present = tuple(str(k) for k in (data or {}) if str(k) in names)
    return LoadedConfig(file, origin, config, tuple(ignored), present)


def config_location(config_file: str | Path | None = None) -> tuple[Path | None, str]:
    """The file that is in force and how it was found; ``(None, reason)`` when there is none."""
    if config_file is not None:
        return Path(config_file).expanduser(), "--config_file"
    override = config_file_override()
    if override is not None:
        path = Path(override).expanduser()
        return (path if path.is_file() else None), "NBACCEL_CONFIG_FILE"
    default = nbaccel_default_config_path()
    if default.is_file():
        return default, "nbaccel default"
    for candidate in accelerate_config_candidates():
        if candidate.is_file():
            return candidate, "Accelerate default"
    return None, "no config file"


def config_in_force(
    config_file: str | Path | None = None, report: Callable[[str], None] | None = _warn
) -> LoadedConfig | None:
    """The config file in force (see the module docstring), loaded; None when there is none.

    Raises:
        ConfigError: an explicit ``config_file`` is missing, or the file is invalid.
    """
    path, origin = config_location(config_file)
    if path is None:
        return None
    return load_config_file(path, origin, report)


def write_location(config_file: str | Path | None = None) -> Path:
    """Where ``nbaccel config`` writes: ``config_file``, else ``NBACCEL_CONFIG_FILE``, else
    ``~/.cache/nbaccel/default_config.yaml``."""
    if config_file is not None:
        return Path(config_file).expanduser()
    override = config_file_override()
    return Path(override).expanduser() if override else nbaccel_default_config_path()


def save_config_file(config: ConfigFile, path: str | Path) -> Path:
    """Write ``config`` as YAML (Accelerate's key names), creating the folder."""
    file = Path(path).expanduser()
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False, default_flow_style=False))
    return file


def basic_config(mixed_precision: str = "no") -> ConfigFile:
    """Sensible settings for this machine: every GPU (counted without initialising CUDA), or
    one CPU process when there is none."""
    if mixed_precision not in PRECISIONS:
        raise ValueError(
            f"mixed_precision={mixed_precision!r} is not allowed; use one of {list(PRECISIONS)}."
        )
    gpus = cuda_device_count()
    return ConfigFile(
        mixed_precision=mixed_precision,
        use_cpu=gpus == 0,
        num_processes=max(gpus, 1),
        distributed_type="MULTI_GPU" if gpus > 1 else "NO",
        gpu_ids="all" if gpus else None,
    )


def write_basic_config(
    mixed_precision: str = "no", save_location: str | None = None
) -> Path | bool:
    """Write a config file with :func:`basic_config` settings; CUDA is not initialised.

    Args:
        mixed_precision: ``"no"``, ``"fp16"``, ``"bf16"`` or ``"fp8"``.
        save_location: the file; by default ``NBACCEL_CONFIG_FILE`` or
            ``~/.cache/nbaccel/default_config.yaml``.

    Returns:
        The path written, or False when a file already exists there (it is left alone).
    """
    path = write_location(save_location)
    if path.exists():
        print(
            f"nbaccel: a configuration already exists at {path}; it was not overwritten. Run "
            "`nbaccel config update` to change it, or pass another save_location.",
            file=sys.stderr,
        )
        return False
    return save_config_file(basic_config(mixed_precision), path)
