"""Checkpointing: save_state / load_state with atomic directories, model export, safe loading.

This package writes and reads files; it sits below the FSDP code, which uses its helpers. The
Accelerator's checkpointing part, which combines both, is :mod:`nbaccel.training.checkpointer`.
"""

from .export import parse_size, save_model_files

# .loading (load_checkpoint_in_model, load_checkpoint_and_dispatch) is imported by its path: it
# builds on the model helpers, which import this package's simple file helpers.
__all__ = ["parse_size", "save_model_files"]
