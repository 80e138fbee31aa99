"""The documented configuration dataclasses, validated when they are built."""

from __future__ import annotations

import dataclasses
from typing import Any

from .enums import DynamoBackend

__all__ = ["GradientAccumulationPlugin", "TorchDynamoPlugin"]


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
