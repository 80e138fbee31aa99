"""The Accelerator's constructor arguments: type checks, kwargs handlers, deprecated loader
arguments and the gradient-accumulation plugin, resolved before any state is built."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from .config.resolve import configured_accumulation_steps
from .data import DataLoaderConfiguration
from .fsdp import FullyShardedDataParallelPlugin
from .kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
)
from .plugins import GradientAccumulationPlugin, ProjectConfiguration, TorchDynamoPlugin
from .profiling import ProfileKwargs
from .validation import check_bool, check_instance, check_path, is_int

__all__ = [
    "UNSET",
    "accumulation_plugin",
    "check_arguments",
    "handler_map",
    "resolve_dataloader_config",
]

_HANDLERS = (
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    AutocastKwargs,
    ProfileKwargs,
)
UNSET: Any = object()


def check_arguments(**given: Any) -> None:
    """Type checks of the Accelerator's arguments that the state does not make itself."""
    for name in ("device_placement", "step_scheduler_with_optimizer"):
        check_bool(f"Accelerator({name})", given[name])
    check_path("Accelerator(project_dir)", given["project_dir"])
    kinds = {
        "dataloader_config": (DataLoaderConfiguration, "a DataLoaderConfiguration"),
        "project_config": (ProjectConfiguration, "a ProjectConfiguration"),
        "dynamo_plugin": (TorchDynamoPlugin, "a TorchDynamoPlugin"),
        "fsdp_plugin": (FullyShardedDataParallelPlugin, "a FullyShardedDataParallelPlugin"),
    }
    for name, (kind, what) in kinds.items():
        check_instance(f"Accelerator({name})", given[name], kind, what)


def handler_map(kwargs_handlers: list[KwargsHandler] | None) -> dict[type, KwargsHandler]:
    found: dict[type, KwargsHandler] = {}
    for handler in kwargs_handlers or []:
        kind = type(handler)
        if kind not in _HANDLERS:
            allowed = ", ".join(h.__name__ for h in _HANDLERS)
            raise TypeError(f"kwargs_handlers got a {kind.__name__}; allowed: {allowed}.")
        if kind in found:
            raise ValueError(f"kwargs_handlers has two {kind.__name__} objects; pass one.")
        found[kind] = handler
    return found


def resolve_dataloader_config(
    config: DataLoaderConfiguration | None, overrides: dict[str, Any]
) -> DataLoaderConfiguration:
    config = config or DataLoaderConfiguration()
    given = {k: v for k, v in overrides.items() if v is not UNSET}
    if not given:
        return config
    warnings.warn(
        f"Passing {sorted(given)} to Accelerator() directly is deprecated; use "
        "dataloader_config=DataLoaderConfiguration(...).",
        FutureWarning,
        stacklevel=3,
    )
    return dataclasses.replace(config, **given)


def accumulation_plugin(
    steps: int, plugin: GradientAccumulationPlugin | None
) -> GradientAccumulationPlugin:
    if plugin is not None:
        if steps != 1:
            raise ValueError(
                "Pass gradient_accumulation_steps or gradient_accumulation_plugin, not both."
            )
        return plugin
    if steps == 1 and not isinstance(steps, bool):  # not given: the config file's, if it says
        steps = configured_accumulation_steps() or 1
    if not is_int(steps) or steps < 1:
        raise ValueError(
            f"gradient_accumulation_steps={steps!r} is not allowed; it must be an int >= 1."
        )
    return GradientAccumulationPlugin(num_steps=steps)
