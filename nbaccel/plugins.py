"""The documented configuration dataclasses, validated when they are built."""

from __future__ import annotations

import dataclasses
from typing import Any

from .enums import DynamoBackend
from .validation import check_bool, check_path

__all__ = ["GradientAccumulationPlugin", "ProjectConfiguration", "TorchDynamoPlugin"]


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
        if isinstance(self.num_steps, bool) or not isinstance(self.num_steps, int):
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

    Args:
        backend: a :class:`DynamoBackend` or its name; ``NO`` disables compilation.
        mode: ``"default"``, ``"reduce-overhead"``, ``"max-autotune"`` or
            ``"max-autotune-no-cudagraphs"``.
        fullgraph: require the whole model to compile as one graph.
        dynamic: compile for dynamic shapes.
    """

    backend: DynamoBackend | str = DynamoBackend.NO
    mode: str = "default"
    fullgraph: bool = False
    dynamic: bool | None = None

    def __post_init__(self) -> None:
        self.backend = DynamoBackend.parse(self.backend, "TorchDynamoPlugin(backend)")
        check_bool("TorchDynamoPlugin(fullgraph)", self.fullgraph)
        check_bool("TorchDynamoPlugin(dynamic)", self.dynamic, allow_none=True)
        modes = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
        if self.mode not in modes:
            raise ValueError(f"TorchDynamoPlugin(mode={self.mode!r}) must be one of {modes}.")

    def to_kwargs(self) -> dict[str, Any]:
        """Arguments for ``torch.compile``."""
        return {
            "backend": str(self.backend).lower(),
            "mode": self.mode,
            "fullgraph": self.fullgraph,
            "dynamic": self.dynamic,
        }


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
        if self.total_limit is not None and (
            isinstance(self.total_limit, bool) or not isinstance(self.total_limit, int)
        ):
            raise TypeError("ProjectConfiguration(total_limit=...) must be an int or None.")
        if self.total_limit is not None and self.total_limit < 1:
            raise ValueError(
                f"ProjectConfiguration(total_limit={self.total_limit}) must be at least 1."
            )
        if isinstance(self.iteration, bool) or not isinstance(self.iteration, int):
            raise TypeError("ProjectConfiguration(iteration=...) must be an int.")
        if self.iteration < 0:
            raise ValueError(f"ProjectConfiguration(iteration={self.iteration}) must be >= 0.")

    def set_directories(self, project_dir: str | None = None) -> None:
        """Set ``project_dir`` (and ``logging_dir`` when it followed ``project_dir``)."""
        follows = self.logging_dir in (None, self.project_dir)
        self.project_dir = project_dir
        if follows:
            self.logging_dir = project_dir
