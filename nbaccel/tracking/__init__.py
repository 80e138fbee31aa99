"""Experiment tracking: trackers behind ``Accelerator(log_with=...)`` and a progress bar."""

from .base import GeneralTracker, on_main_process
from .comet import CometMLTracker
from .jsonl import JSONLTracker
from .mlflow import MLflowTracker
from .progress import progress
from .refused import AimTracker, ClearMLTracker, DVCLiveTracker, SwanLabTracker, TrackioTracker
from .registry import (
    LOGGER_TYPE_TO_CLASS,
    available_trackers,
    is_comet_ml_available,
    is_mlflow_available,
    is_tensorboard_available,
    is_tracker_available,
    is_wandb_available,
    register_tracker_class,
    resolve_log_with,
)
from .tensorboard import TensorBoardTracker
from .wandb import WandBTracker

filter_trackers = resolve_log_with

__all__ = [
    "LOGGER_TYPE_TO_CLASS",
    "AimTracker",
    "ClearMLTracker",
    "CometMLTracker",
    "DVCLiveTracker",
    "GeneralTracker",
    "JSONLTracker",
    "MLflowTracker",
    "SwanLabTracker",
    "TensorBoardTracker",
    "TrackioTracker",
    "WandBTracker",
    "available_trackers",
    "filter_trackers",
    "is_comet_ml_available",
    "is_mlflow_available",
    "is_tensorboard_available",
    "is_tracker_available",
    "is_wandb_available",
    "on_main_process",
    "progress",
    "register_tracker_class",
    "resolve_log_with",
]
