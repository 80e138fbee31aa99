"""More helpers on nested tensors: shape descriptions, padding inputs for an even split,
fp32 model outputs, copies across processes."""

from __future__ import annotations

import dataclasses
import functools
import pickle
from collections.abc import Callable
from typing import Any

import torch

from ..state import PartialState
from .collectives import broadcast, broadcast_object_list
from .nested import convert_to_fp32, recursively_apply
from .padding_warning import CannotPadNestedTensorWarning

__all__ = [
    "CannotPadNestedTensorWarning",
    "TensorInformation",
    "convert_outputs_to_fp32",
    "copy_tensor_to_devices",
    "get_data_structure",
    "initialize_tensors",
    "is_tensor_information",
    "pad_input_tensors",
]


@dataclasses.dataclass
class TensorInformation:
    """A tensor's shape and dtype, standing in for the tensor (see ``get_data_structure``)."""

    shape: torch.Size
    dtype: torch.dtype


def is_tensor_information(tensor_info: Any) -> bool:
    """True for a :class:`TensorInformation`."""
    return isinstance(tensor_info, TensorInformation)


def get_data_structure(data: Any) -> Any:
    """The same nested structure with every tensor replaced by its :class:`TensorInformation`."""

    def _describe(tensor: torch.Tensor) -> TensorInformation:
        return TensorInformation(shape=tensor.shape, dtype=tensor.dtype)

    return recursively_apply(_describe, data)


def initialize_tensors(data_structure: Any) -> Any:
    """Empty tensors for every :class:`TensorInformation` of ``data_structure``."""

    def _make(info: TensorInformation) -> torch.Tensor:
        return torch.empty(*info.shape, dtype=info.dtype)

    return recursively_apply(_make, data_structure, test_type=is_tensor_information)


def _pad_rows(tensor: torch.Tensor, batch_size: int, num_processes: int, dim: int) -> torch.Tensor:
    per_process = batch_size // num_processes
    rest = batch_size - per_process * num_processes
    to_pad = num_processes - batch_size if per_process == 0 else num_processes - per_process
    if rest > to_pad & to_pad < 1:  # Accelerate's rule, kept as it is for equal results
        to_pad = rest - to_pad
    size = list(tensor.shape)
    size[0] = batch_size + to_pad
    padded = tensor.new_zeros(tuple(size))
    index = tuple(
        slice(0, tensor.shape[dim]) if i == dim else slice(None) for i, _ in enumerate(size)
    )
    padded[index] = tensor
    return padded


def pad_input_tensors(tensor: Any, batch_size: int, num_processes: int, dim: int = 0) -> Any:
    """Pad (nested) input tensors with zero rows so ``batch_size`` rows split evenly between
    ``num_processes`` processes (as ``split_between_processes(..., apply_padding=True)``
    needs for model inputs).

    Raises:
        TypeError: a leaf that is not a tensor.
    """
    return recursively_apply(
        _pad_rows,
        tensor,
        error_on_other_type=True,
        batch_size=batch_size,
        num_processes=num_processes,
        dim=dim,
    )


class _OutputsToFp32:
    """A picklable forward wrapper that casts half-precision outputs to float32."""

    def __init__(self, model_forward: Callable[..., Any]) -> None:
        self.model_forward = model_forward
        functools.update_wrapper(self, model_forward)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return convert_to_fp32(self.model_forward(*args, **kwargs))

    def __getstate__(self) -> Any:
        raise pickle.PicklingError(
            "Cannot pickle a model whose forward is wrapped by convert_outputs_to_fp32; call "
            "accelerator.unwrap_model(model, keep_fp32_wrapper=False) before pickling it."
        )


def convert_outputs_to_fp32(model_forward: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a forward so its float16 / bfloat16 outputs come back as float32; the original is
    ``result.__wrapped__``."""
    wrapper = _OutputsToFp32(model_forward)

    def forward(*args: Any, **kwargs: Any) -> Any:
        return wrapper(*args, **kwargs)

    forward.__wrapped__ = wrapper  # type: ignore[attr-defined]
    return forward


def copy_tensor_to_devices(tensor: torch.Tensor | None = None) -> torch.Tensor:
    """Rank 0's ``tensor`` on every process (the others pass ``None``, or anything).

    The shape and dtype travel first, so the other processes need not know them.
    """
    state = PartialState()
    if state.is_main_process and not isinstance(tensor, torch.Tensor):
        raise TypeError(
            "copy_tensor_to_devices needs a tensor on the main process, got "
            f"{type(tensor).__name__}."
        )
    info = [get_data_structure(tensor) if state.is_main_process else None]
    broadcast_object_list(info)
    target: Any = tensor if state.is_main_process else initialize_tensors(info[0])
    return broadcast(target.to(state.device))
