"""The Accelerator's constructor arguments: type checks, kwargs handlers, deprecated loader
arguments and the gradient-accumulation plugin, resolved before any state is built."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, TypeVar

from ..config.resolve import configured_accumulation_steps, configured_dynamo_plugin
from ..data import DataLoaderConfiguration
from ..deepspeed import DeepSpeedPlugin
from ..environment import deepspeed_launched
from ..fsdp import FullyShardedDataParallelPlugin
from ..fsdp.config_keys import launched_with_fsdp
from ..kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
)
from ..plugins import (
    GradientAccumulationPlugin,
    ProjectConfiguration,
    TorchDynamoPlugin,
    launched_dynamo_plugin,
)
from ..profiling import ProfileKwargs
from ..state.registry import STATE
from ..validation import check_bool, check_instance, check_path, is_int

__all__ = [
    "UNSET",
    "accumulation_plugin",
    "check_arguments",
    "deepspeed_accumulation",
    "handler_map",
    "mixed_precision_of",
    "project_configuration",
    "resolve_dataloader_config",
    "resolve_deepspeed_plugins",
    "resolve_dynamo_plugin",
    "resolve_fsdp_plugin",
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


H = TypeVar("H", bound=KwargsHandler)


class Handlers:
    """The ``kwargs_handlers`` given, at most one of each kind, looked up by kind."""

    def __init__(self, found: dict[type, KwargsHandler]) -> None:
        self._found = found

    def get(self, kind: type[H]) -> H | None:
        found = self._found.get(kind)
        return found if isinstance(found, kind) else None

    process_group = property(lambda self: self.get(InitProcessGroupKwargs))
    autocast = property(lambda self: self.get(AutocastKwargs))
    scaler = property(lambda self: self.get(GradScalerKwargs))
    ddp = property(lambda self: self.get(DistributedDataParallelKwargs))
    profile = property(lambda self: self.get(ProfileKwargs))


def handler_map(kwargs_handlers: list[KwargsHandler] | None) -> Handlers:
    found: dict[type, KwargsHandler] = {}
    for handler in kwargs_handlers or []:
        kind = type(handler)
        if kind not in _HANDLERS:
            allowed = ", ".join(h.__name__ for h in _HANDLERS)
            raise TypeError(f"kwargs_handlers got a {kind.__name__}; allowed: {allowed}.")
        if kind in found:
            raise ValueError(f"kwargs_handlers has two {kind.__name__} objects; pass one.")
        found[kind] = handler
    return Handlers(found)


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


def deepspeed_accumulation(
    plugin: DeepSpeedPlugin, accumulation: GradientAccumulationPlugin
) -> GradientAccumulationPlugin:
    """The accumulation under DeepSpeed: the DeepSpeed config's steps win (a warning when the
    Accelerator was given others); ``"auto"`` takes the Accelerator's."""
    plugin.fill_match(
        "gradient_accumulation_steps",
        must_match=False,
        gradient_accumulation_steps=accumulation.num_steps,
    )
    steps = int(plugin.get_value("gradient_accumulation_steps"))
    plugin.gradient_accumulation_steps = steps
    if steps == accumulation.num_steps:
        return accumulation
    if accumulation.num_steps != 1:
        warnings.warn(
            f"gradient_accumulation_steps: the Accelerator was given {accumulation.num_steps}, "
            f"the DeepSpeed config says {steps}; DeepSpeed's {steps} is used.",
            UserWarning,
            stacklevel=3,
        )
    return dataclasses.replace(accumulation, num_steps=steps)


def mixed_precision_of(mixed_precision: str | None, fp16: bool | None) -> str | None:
    """``mixed_precision``, with the deprecated ``fp16=True`` read as ``"fp16"``."""
    if fp16:
        warnings.warn(
            "fp16=True is deprecated; use mixed_precision='fp16'.", FutureWarning, stacklevel=3
        )
        return mixed_precision or "fp16"
    return mixed_precision


def resolve_fsdp_plugin(given: Any) -> Any:
    """The plugin given; else, for the first Accelerator of a launched process whose launch
    has FSDP settings, a plugin built from the launch's ``fsdp_config``. Whether the plugin is
    used is the state's rule: only in a launched process (``state/rules.py``)."""
    if given is None and STATE.accelerator is None and launched_with_fsdp():
        return FullyShardedDataParallelPlugin()
    return given


def resolve_deepspeed_plugins(plugin: Any, plugins: Any) -> Any:
    """``deepspeed_plugin`` or ``deepspeed_plugins`` (one plugin, or a dict of named ones),
    type-checked; else, for the first Accelerator of a process whose launch asked for
    DeepSpeed (``ACCELERATE_USE_DEEPSPEED``), a plugin built from the launch's settings."""
    if plugin is not None and plugins is not None:
        raise ValueError(
            "Pass deepspeed_plugin or deepspeed_plugins to Accelerator(), not both (they are "
            "one argument under two names)."
        )
    given = plugin if plugin is not None else plugins
    if given is None:
        if STATE.accelerator is None and deepspeed_launched():
            return DeepSpeedPlugin()
        return None
    listed = given.values() if isinstance(given, dict) else [given]
    for item in listed:
        if not isinstance(item, DeepSpeedPlugin):
            raise TypeError(
                "Accelerator(deepspeed_plugin=...) takes a DeepSpeedPlugin or a dict of named "
                f"DeepSpeedPlugin objects, got {type(item).__name__}."
            )
    return given


def resolve_dynamo_plugin(
    backend: Any, plugin: TorchDynamoPlugin | None
) -> TorchDynamoPlugin | None:
    """``dynamo_plugin``, else one for ``dynamo_backend``, else the config file's
    ``dynamo_config``, else the ``ACCELERATE_DYNAMO_*`` variables."""
    if plugin is not None:
        return plugin
    if backend is not None:
        return TorchDynamoPlugin(backend=backend)
    return configured_dynamo_plugin() or launched_dynamo_plugin()


def project_configuration(
    config: ProjectConfiguration | None, project_dir: str | None
) -> ProjectConfiguration:
    """The project configuration given (or a new one), its directories set from
    ``project_dir`` when that is given."""
    config = config or ProjectConfiguration(project_dir=project_dir)
    if project_dir is not None:
        config.set_directories(project_dir)
    return config
