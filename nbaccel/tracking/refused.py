"""Accelerate's trackers that nbaccel does not ship: the classes exist (imports and
``isinstance`` checks work); building one raises an error that says what to do instead."""

from __future__ import annotations

from typing import Any

from .base import GeneralTracker

__all__ = ["AimTracker", "ClearMLTracker", "DVCLiveTracker", "SwanLabTracker", "TrackioTracker"]


class _NotShipped(GeneralTracker):
    name = ""
    requires_logging_directory = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            f"nbaccel has no built-in {self.name} tracker; built in are jsonl, tensorboard, "
            f"wandb, mlflow and comet_ml. Write a GeneralTracker subclass around {self.name}, "
            "register it with register_tracker_class and name it in log_with "
            "(docs/tracking.md, 'Your own tracker')."
        )


class AimTracker(_NotShipped):
    """Accelerate's Aim tracker: not shipped by nbaccel (building one raises)."""

    name = "aim"


class ClearMLTracker(_NotShipped):
    """Accelerate's ClearML tracker: not shipped by nbaccel (building one raises)."""

    name = "clearml"


class DVCLiveTracker(_NotShipped):
    """Accelerate's DVCLive tracker: not shipped by nbaccel (building one raises)."""

    name = "dvclive"


class SwanLabTracker(_NotShipped):
    """Accelerate's SwanLab tracker: not shipped by nbaccel (building one raises)."""

    name = "swanlab"


class TrackioTracker(_NotShipped):
    """Accelerate's Trackio tracker: not shipped by nbaccel (building one raises)."""

    name = "trackio"
