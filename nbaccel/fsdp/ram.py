"""RAM-efficient loading: only the first process materialises the weights; the others start
empty (on the ``meta`` device) and receive their shards from it at ``prepare``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from ..environment import fsdp_ram_efficient_loading_enabled, set_fsdp_ram_efficient_loading
from ..state import PartialState

__all__ = [
    "disable_fsdp_ram_efficient_loading",
    "enable_fsdp_ram_efficient_loading",
    "has_meta_tensors",
    "is_ram_efficient_loading",
    "ram_efficient_init",
]


def enable_fsdp_ram_efficient_loading() -> None:
    """Enable RAM-efficient loading of models for FSDP in the environment."""
    set_fsdp_ram_efficient_loading(True)


def disable_fsdp_ram_efficient_loading() -> None:
    """Disable RAM-efficient loading of models for FSDP in the environment."""
    set_fsdp_ram_efficient_loading(False)


def is_ram_efficient_loading() -> bool:
    """Whether the toggle is on (``enable_fsdp_ram_efficient_loading`` or the variable)."""
    return fsdp_ram_efficient_loading_enabled()


@contextlib.contextmanager
def ram_efficient_init(enabled: bool | None = None) -> Iterator[bool]:
    """Build a model inside this block: on processes other than the first (when RAM-efficient
    loading is on) its tensors go to the ``meta`` device and take no memory. Yields whether
    this process builds an empty model.

    Example::

        with ram_efficient_init():
            model = MyBigModel()          # real weights on process 0 only
        model = accelerator.prepare(model)  # process 0's weights reach every shard
    """

    on = is_ram_efficient_loading() if enabled is None else enabled
    empty = bool(on) and PartialState().process_index != 0
    if not empty:
        yield False
        return
    with torch.device("meta"):
        yield True


def has_meta_tensors(model: nn.Module) -> bool:
    """True when some parameter or buffer of ``model`` is on the ``meta`` device."""
    tensors = [*model.parameters(), *model.buffers()]
    return any(t.is_meta for t in tensors)
