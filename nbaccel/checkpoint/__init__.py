"""Checkpointing: save_state / load_state with atomic directories, model export, safe loading.

The Accelerator's methods live in :mod:`.mixin`, which sits above the strategies and is
imported from there (not here), so that the FSDP code can use this package's file helpers.
"""

from .export import load_checkpoint_in_model, parse_size, save_model_files

__all__ = ["load_checkpoint_in_model", "parse_size", "save_model_files"]
