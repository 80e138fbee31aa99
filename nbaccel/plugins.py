"""The documented configuration dataclasses, validated when they are built."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .enums import DynamoBackend
from .environment.dynamo import dynamo_settings
from .validation import check_bool, check_path, is_int

__all__ = [
    "GradientAccumulationPlugin",
    "ProjectConfiguration",
    "TorchDynamoPlugin",
    "launched_dynamo_plugin",
]


def fill_unset(plugin: Any, defaults: Mapping[str, Any], given: Mapping[str, Any]) -> None:
    """Set each field of ``plugin`` named in ``defaults`` that is still None: to its value in
    ``given`` (the launch's settings) when it is there, else to its default."""
    for name, default in defaults.items():
        if getattr(plugin, name) is None:
            setattr(plugin, name, given.get(name, default))


@dataclasses.dataclass
class GradientAccumulationPlugin:
    """How gradients are accumulated.

    Args:
        num_steps: batches to accumulate before an optimizer step (at least 1).
        adjust_scheduler: step the scheduler once per ``num_steps`` batches.
        sync_with_dataloader: synchronise and reset at the end of each data loader.
        sync_each_batch: synchronise gradients on every batch (less memory, more traffic).
    """

    num_steps: int = 1
    adjust_scheduler: bool = True
    sync_with_dataloader: bool = True
    sync_each_batch: bool = False

    def __post_init__(self) -> None:
        if not is_int(self.num_steps):
            raise TypeError(
                "GradientAccumulationPlugin(num_steps=...) must be an int, "
                f"got {type(self.num_steps).__name__}."
            )
        if self.num_steps < 1:
            raise ValueError(
                f"GradientAccumulationPlugin(num_steps={self.num_steps}) must be at least 1."
            )
        for name in ("adjust_scheduler", "sync_with_dataloader", "sync_each_batch"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"GradientAccumulationPlugin({name}=...) must be True or False.")

    def to_kwargs(self) -> dict[str, Any]:
        """The plugin as a plain dict."""
        return dataclasses.asdict(self)


@dataclasses.dataclass
class TorchDynamoPlugin:
    """Options for ``torch.compile``.

    A field left at None takes its value from the ``ACCELERATE_DYNAMO_*`` variables that
    ``accelerate launch`` / ``nbaccel launch`` write (``..._BACKEND``, ``..._MODE``,
    ``..._USE_FULLGRAPH``, ``..._USE_DYNAMIC``, ``..._USE_REGIONAL_COMPILATION``), else its
    default, as in Accelerate.

    Args:
        backend: a :class:`DynamoBackend` or its name; ``NO`` (the default) disables
            compilation.
        mode: ``"default"``, ``"reduce-overhead"``, ``"max-autotune"`` or
            ``"max-autotune-no-cudagraphs"``.
        fullgraph: require the whole model to compile as one graph (default False).
        dynamic: compile for dynamic shapes (None: torch decides).
        options: a dict of backend options for ``torch.compile``.
        disable: make ``torch.compile`` a no-op (for testing).
        use_regional_compilation: compile each block of a repeated ``ModuleList`` on its own
            and the rest of the model separately (faster cold start).
    """

    backend: DynamoBackend | str | None = None
    mode: str | None = None
    fullgraph: bool | None = None
    dynamic: bool | None = None
    options: Any = None
    disable: bool = False
    use_regional_compilation: bool | None = None

    def __post_init__(self) -> None:

        given = dynamo_settings()
        fill_unset(self, _DYNAMO_DEFAULTS, given)
        if self.dynamic is None:
            self.dynamic = given.get("dynamic")
        self.backend = DynamoBackend.parse(self.backend, "TorchDynamoPlugin(backend)")
        for name in ("fullgraph", "disable", "use_regional_compilation"):
            check_bool(f"TorchDynamoPlugin({name})", getattr(self, name))
        check_bool("TorchDynamoPlugin(dynamic)", self.dynamic, allow_none=True)
        modes = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
        if self.mode not in modes:
            raise ValueError(f"TorchDynamoPlugin(mode={self.mode!r}) must be one of {modes}.")
        if self.options is not None and not isinstance(self.options, dict):
            raise TypeError(f"TorchDynamoPlugin(options=...) must be a dict, got {self.options!r}.")

    def to_dict(self) -> dict[str, Any]:
        """Every field, the backend as its lower-case name."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["backend"] = str(self.backend).lower()
        return values

    def to_kwargs(self) -> dict[str, Any]:
        """Arguments for ``torch.compile``: the fields that differ from their defaults."""
        defaults = {**_DYNAMO_DEFAULTS, "backend": "no", "dynamic": None, "options": None}
        defaults["disable"] = False
        values = self.to_dict()
        values.pop("use_regional_compilation")
        return {k: v for k, v in values.items() if v != defaults[k]}


_DYNAMO_DEFAULTS: dict[str, Any] = {
    "backend": DynamoBackend.NO,
    "mode": "default",
    "fullgraph": False,
    "use_regional_compilation": False,
}


def launched_dynamo_plugin() -> TorchDynamoPlugin | None:
    """The plugin the ``ACCELERATE_DYNAMO_*`` variables describe; None when they name no
    backend (or ``NO``)."""
    plugin = TorchDynamoPlugin()
    return None if plugin.backend == DynamoBackend.NO else plugin


@dataclasses.dataclass
class ProjectConfiguration:
    """Where a project writes its checkpoints and logs.

    Args:
        project_dir: the project's directory (checkpoints go to ``project_dir/checkpoints``).
        logging_dir: where trackers write; defaults to ``project_dir``.
        automatic_checkpoint_naming: name checkpoints ``checkpoint_{i}`` automatically.
        total_limit: keep at most this many automatic checkpoints (None: all).
        iteration: the next checkpoint number.
        save_on_each_node: also save on the main process of every machine.
    """

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False

    def __post_init__(self) -> None:
        check_path("ProjectConfiguration(project_dir)", self.project_dir)
        check_path("ProjectConfiguration(logging_dir)", self.logging_dir)
        check_bool(
            "ProjectConfiguration(automatic_checkpoint_naming)", self.automatic_checkpoint_naming
        )
        check_bool("ProjectConfiguration(save_on_each_node)", self.save_on_each_node)
        if self.logging_dir is None:
            self.logging_dir = self.project_dir
        if self.total_limit is not None and (not is_int(self.total_limit)):
            raise TypeError("ProjectConfiguration(total_limit=...) must be an int or None.")
        if self.total_limit is not None and self.total_limit < 1:
            raise ValueError(
                f"ProjectConfiguration(total_limit={self.total_limit}) must be at least 1."
            )
        if not is_int(self.iteration):
            raise TypeError("ProjectConfiguration(iteration=...) must be an int.")
        if self.iteration < 0:
            raise ValueError(f"ProjectConfiguration(iteration={self.iteration}) must be >= 0.")

    def set_directories(self, project_dir: str | None = None) -> None:
        """Set ``project_dir`` (and ``logging_dir`` when it followed ``project_dir``)."""
        follows = self.logging_dir in (None, self.project_dir)
        self.project_dir = project_dir
        if follows:
            self.logging_dir = project_dir
