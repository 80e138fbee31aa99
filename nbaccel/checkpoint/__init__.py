"""Checkpointing: save_state / load_state with atomic directories, model export, safe loading.

This package writes and reads files; it sits below the FSDP code, which uses its helpers. The
Accelerator's checkpointing part, which combines both, is :mod:`nbaccel.training.checkpointer`.
"""

from .export import load_checkpoint_in_model, parse_size, save_model_files

__all__ = ["load_checkpoint_in_model", "parse_size", "save_model_files"]
