"""The Accelerator's checkpointing methods (``docs/checkpointing.md``): its ``Checkpointer``
answers them.

Each is written out with the checkpointer's signature, takes its docstring through
``documented_by`` and calls ``self._checkpointer``, which is declared here with its type, so
mypy checks every call against ``Checkpointer``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from .checkpointer import Checkpointer
from .documented import documented_by

__all__ = ["CheckpointingMethods"]


class CheckpointingMethods:
    """Base of ``Accelerator``: what it passes on to ``self._checkpointer``."""

    _checkpointer: Checkpointer

    @documented_by(Checkpointer.save_state)
    def save_state(
        self,
        output_dir: str | os.PathLike[str] | None = None,
        safe_serialization: bool = True,
        **save_model_func_kwargs: Any,
    ) -> str:
        return self._checkpointer.save_state(
            output_dir, safe_serialization, **save_model_func_kwargs
        )

    @documented_by(Checkpointer.load_state)
    def load_state(
        self,
        input_dir: str | os.PathLike[str] | None = None,
        load_kwargs: dict[str, Any] | None = None,
        **load_model_func_kwargs: Any,
    ) -> None:
        self._checkpointer.load_state(input_dir, load_kwargs, **load_model_func_kwargs)

    @documented_by(Checkpointer.save_model)
    def save_model(
        self,
        model: nn.Module,
        save_directory: str | os.PathLike[str],
        max_shard_size: int | str = "10GB",
        safe_serialization: bool = True,
    ) -> None:
        self._checkpointer.save_model(model, save_directory, max_shard_size, safe_serialization)

    @documented_by(Checkpointer.save)
    def save(self, obj: Any, f: Any, safe_serialization: bool = False) -> None:
        self._checkpointer.save(obj, f, safe_serialization)

    @documented_by(Checkpointer.get_state_dict)
    def get_state_dict(self, model: nn.Module, unwrap: bool = True) -> dict[str, torch.Tensor]:
        return self._checkpointer.get_state_dict(model, unwrap)

    @documented_by(Checkpointer.register_for_checkpointing)
    def register_for_checkpointing(self, *objects: Any) -> None:
        self._checkpointer.register_for_checkpointing(*objects)

    @documented_by(Checkpointer.register_save_state_pre_hook)
    def register_save_state_pre_hook(self, hook: Callable[..., None]) -> RemovableHandle:
        return self._checkpointer.register_save_state_pre_hook(hook)

    @documented_by(Checkpointer.register_load_state_pre_hook)
    def register_load_state_pre_hook(self, hook: Callable[..., None]) -> RemovableHandle:
        return self._checkpointer.register_load_state_pre_hook(hook)

    @property
    @documented_by(Checkpointer.save_iteration)
    def save_iteration(self) -> int:
        return self._checkpointer.save_iteration

    @property
    @documented_by(Checkpointer.custom_objects)
    def _custom_objects(self) -> list[Any]:
        return self._checkpointer.custom_objects
