"""Checkpointing: save_state / load_state with atomic directories, model export, safe loading."""

from .export import load_checkpoint_in_model, parse_size, save_model_files
from .mixin import CheckpointingMixin

__all__ = ["CheckpointingMixin", "load_checkpoint_in_model", "parse_size", "save_model_files"]
