"""Memory helpers: free device caches, drop references, find a batch size that fits."""

from __future__ import annotations

import functools
import gc
import inspect
from collections.abc import Callable
from typing import Any

import torch

__all__ = [
    "clear_device_cache",
    "find_executable_batch_size",
    "release_memory",
    "should_reduce_batch_size",
]

# The messages of the errors that mean "this batch does not fit" on each device kind.
_OUT_OF_MEMORY = (
    " out of memory.",  # CUDA, ROCm, XPU
    "MPS backend out of memory",
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",
    "DefaultCPUAllocator: can't allocate memory",
    "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed",  # HPU
)


def clear_device_cache(garbage_collection: bool = False) -> None:
    """Empty the caching allocator of the devices in use (and first ``gc.collect()`` when
    ``garbage_collection``). Never initialises a device that was not used."""
    if garbage_collection:
        gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    for name in ("xpu", "mps"):
        backend = getattr(torch, name, None)
        ready = getattr(backend, "is_initialized", None) or getattr(backend, "is_available", None)
        if backend is not None and ready is not None and ready():
            backend.empty_cache()


def release_memory(*objects: Any) -> list[None]:
    """Drop references and free caches: ``a, b = release_memory(a, b)`` (each becomes None)."""
    released: list[None] = [None] * len(objects)
    del objects
    clear_device_cache(garbage_collection=True)
    return released


def should_reduce_batch_size(exception: Exception) -> bool:
    """True when ``exception`` says the batch did not fit in memory."""
    if isinstance(exception, RuntimeError) and len(exception.args) == 1:
        return any(text in str(exception.args[0]) for text in _OUT_OF_MEMORY)
    return False


def _check_no_batch_size_given(function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    params = list(inspect.signature(function).parameters)
    if len(params) < len(args) + 1:
        given = ", ".join(
            f"{name}={value}" for name, value in zip(params[1:], args[1:], strict=False)
        )
        raise TypeError(
            f"Batch size was passed into `{function.__name__}` as the first argument when "
            f"called. Remove it, the decorator passes it: `{function.__name__}({given})`."
        )


def find_executable_batch_size(
    function: Callable[..., Any] | None = None,
    starting_batch_size: int = 128,
    reduce_batch_size_fn: Callable[[], int] | None = None,
) -> Any:
    """Decorator: call ``function(batch_size, *args, **kwargs)``, starting at
    ``starting_batch_size``; after an out-of-memory error free the caches, reduce the batch
    size (to 90 %, or to what ``reduce_batch_size_fn()`` returns) and try again.

    Raises:
        RuntimeError: the batch size reached zero.
        TypeError: the caller passed the batch size itself.
    """
    if function is None:
        return functools.partial(
            find_executable_batch_size,
            starting_batch_size=starting_batch_size,
            reduce_batch_size_fn=reduce_batch_size_fn,
        )
    batch_size = starting_batch_size

    def ninety_percent() -> int:
        return int(batch_size * 0.9)

    reduce = reduce_batch_size_fn or ninety_percent

    @functools.wraps(function)
    def decorator(*args: Any, **kwargs: Any) -> Any:
        nonlocal batch_size
        clear_device_cache(garbage_collection=True)
        _check_no_batch_size_given(function, args)
        while True:
            if batch_size == 0:
                raise RuntimeError("No executable batch size found, reached zero.")
            try:
                return function(batch_size, *args, **kwargs)
            except Exception as error:
                if not should_reduce_batch_size(error):
                    raise
                clear_device_cache(garbage_collection=True)
                batch_size = reduce()

    return decorator
