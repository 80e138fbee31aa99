"""Creating a model without memory, or straight on a device: ``init_empty_weights`` and
``init_on_device``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from ..environment.patching import parse_flag_from_env

__all__ = ["init_empty_weights", "init_on_device"]


@contextlib.contextmanager
def init_on_device(
    device: torch.device | str, include_buffers: bool | None = None
) -> Iterator[None]:
    """Context: modules created inside get their parameters (and, with ``include_buffers``,
    their buffers and every tensor made inside) on ``device``. Unset ``include_buffers``
    reads ``ACCELERATE_INIT_INCLUDE_BUFFERS``."""
    if include_buffers is None:
        include_buffers = parse_flag_from_env("ACCELERATE_INIT_INCLUDE_BUFFERS", False)
    if include_buffers:
        with torch.device(device):
            yield
        return
    original = nn.Module.register_parameter

    def register_parameter(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        original(module, name, param)
        if param is not None:
            placed = module._parameters[name]
            assert placed is not None
            extra = dict(placed.__dict__, requires_grad=param.requires_grad)
            module._parameters[name] = type(placed)(placed.to(device), **extra)

    nn.Module.register_parameter = register_parameter  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]


def init_empty_weights(
    include_buffers: bool | None = None,
) -> contextlib.AbstractContextManager[None]:
    """Context: models created inside take no memory (parameters on the ``meta`` device);
    load real weights afterwards (e.g. ``load_checkpoint_in_model`` after ``to_empty``)."""
    return init_on_device(torch.device("meta"), include_buffers=include_buffers)
