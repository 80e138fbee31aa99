"""Model helpers from ``accelerate.utils``: unwrap parallel wrappers, compiled regions, tensor
storage identity, state-dict cleaning, module walks, small naming and size helpers."""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from .environment.availability import is_bitsandbytes_multi_backend_available, is_peft_available
from .environment.patching import parse_flag_from_env
from .modeling import compile_regions
from .precision import Precision

__all__ = [
    "check_quantized_placement",
    "clean_state_dict_for_safetensors",
    "compile_regions",
    "convert_bytes",
    "extract_model_from_parallel",
    "get_module_children_bottom_up",
    "get_pretty_name",
    "has_compiled_regions",
    "id_tensor_storage",
    "init_empty_weights",
    "init_on_device",
    "is_compiled_module",
    "is_peft_model",
    "merge_dicts",
    "model_has_dtensor",
    "recursive_getattr",
]

_LOGGER = logging.getLogger(__name__)


def is_compiled_module(module: nn.Module) -> bool:
    """True for a ``torch.compile``'d module (an ``OptimizedModule``)."""
    dynamo = getattr(torch, "_dynamo", None)
    return dynamo is not None and isinstance(module, dynamo.eval_frame.OptimizedModule)


def has_compiled_regions(module: nn.Module) -> bool:
    """True when some submodule of ``module`` is a ``torch.compile``'d module."""
    if not module._modules:
        return False
    return any(is_compiled_module(sub) for sub in module.modules())


def _parallel_wrappers() -> tuple[type[Any], ...]:
    from torch.distributed.fsdp import FullyShardedDataParallel

    return (nn.parallel.DistributedDataParallel, nn.DataParallel, FullyShardedDataParallel)


def _unwrap_children(module: nn.Module) -> nn.Module:
    inner = module
    while isinstance(getattr(inner, "module", None), nn.Module):
        inner = inner.module  # type: ignore[assignment]
    for name, child in list(inner.named_children()):
        setattr(inner, name, _unwrap_children(child))
    return inner


def _restore_original_forward(model: nn.Module) -> None:
    """Undo forward wrappers recorded the way Accelerate records them: the forward before
    wrapping saved as ``_original_forward`` in the model's ``__dict__``."""
    original = model.__dict__.pop("_original_forward", None)
    if original is None:
        return
    if getattr(original, "__self__", None) is model and getattr(original, "__func__", None) is (
        type(model).forward
    ):
        model.__dict__.pop("forward", None)  # the class's own forward again
    else:
        model.forward = original


def extract_model_from_parallel(
    model: Any,
    keep_fp32_wrapper: bool = True,
    keep_torch_compile: bool = True,
    recursive: bool = False,
) -> Any:
    """The user's model inside DDP / DataParallel / FSDP wrappers.

    Args:
        model: a (possibly wrapped, possibly compiled) model.
        keep_fp32_wrapper: keep the mixed-precision forward that returns float32 outputs.
        keep_torch_compile: return the compiled wrapper around the unwrapped model.
        recursive: also unwrap ``.module`` wrappers of every submodule (FSDP per layer).
    """
    compiled: Any = None
    if is_compiled_module(model) or "_orig_mod" in model.__dict__:
        compiled = model
        inner = model.__dict__.get("_orig_mod")
        model = inner if inner is not None else model._orig_mod
    wrappers = _parallel_wrappers()
    while isinstance(model, wrappers):
        model = model.module
    if recursive:
        model = _unwrap_children(model)
    if not keep_fp32_wrapper:
        Precision.unwrap_forward(model)
        _restore_original_forward(model)
    if keep_torch_compile and compiled is not None:
        if is_compiled_module(compiled):
            compiled._orig_mod = model
        else:
            compiled.__dict__["_orig_mod"] = model
        return compiled
    return model


def is_peft_model(model: nn.Module) -> bool:
    """True for a PEFT ``PeftModel`` (inside any parallel wrapper)."""
    if not is_peft_available():
        return False
    from peft import PeftModel

    return isinstance(extract_model_from_parallel(model), PeftModel)


def id_tensor_storage(tensor: torch.Tensor) -> tuple[torch.device, int, int]:
    """``(device, storage pointer, storage bytes)``: equal for tensors sharing memory."""
    try:
        storage = tensor.untyped_storage()
        return tensor.device, storage.data_ptr(), storage.nbytes()
    except (NotImplementedError, RuntimeError):  # meta tensors have no storage
        return tensor.device, 0, tensor.nelement() * tensor.element_size()


def clean_state_dict_for_safetensors(state_dict: dict[str, Any]) -> dict[str, Any]:
    """Keep one name per shared storage (safetensors refuses shared tensors; a warning names
    what was removed) and make every tensor contiguous."""
    names_by_storage: dict[Any, list[str]] = collections.defaultdict(list)
    for name, tensor in state_dict.items():
        if isinstance(tensor, torch.Tensor):
            names_by_storage[id_tensor_storage(tensor)].append(name)
    removed = {name for names in names_by_storage.values() for name in names[1:]}
    for name in removed:
        del state_dict[name]
    if removed:
        _LOGGER.warning(
            "Removed shared tensors %s while saving; check that reloading reports nothing.",
            sorted(removed),
        )
    return {k: v.contiguous() if isinstance(v, torch.Tensor) else v for k, v in state_dict.items()}


def get_module_children_bottom_up(model: nn.Module, return_fqns: bool = False) -> list[Any]:
    """Every module of ``model``, children before parents (the model last); with
    ``return_fqns``, ``(qualified name, module)`` pairs."""
    stack: list[tuple[str, nn.Module]] = [("", model)]
    ordered: list[tuple[str, nn.Module]] = []
    while stack:
        prefix, current = stack.pop()
        for name, child in current.named_children():
            stack.append((f"{prefix}.{name}" if prefix else name, child))
        ordered.append((prefix, current))
    ordered.reverse()
    return ordered if return_fqns else [module for _, module in ordered]


def merge_dicts(source: dict[Any, Any], destination: dict[Any, Any]) -> dict[Any, Any]:
    """Merge nested dict ``source`` into ``destination`` (in place; returned)."""
    for key, value in source.items():
        if isinstance(value, dict):
            merge_dicts(value, destination.setdefault(key, {}))
        else:
            destination[key] = value
    return destination


def recursive_getattr(obj: Any, attr: str) -> Any:
    """``getattr`` along a dotted path: ``recursive_getattr(model, "encoder.layer.0")``."""
    return functools.reduce(getattr, attr.split("."), obj)


def get_pretty_name(obj: Any) -> str:
    """A readable name: the qualified name of a function or class, of an object's class."""
    if not hasattr(obj, "__qualname__") and not hasattr(obj, "__name__"):
        obj = getattr(obj, "__class__", obj)
    return str(getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or obj)


def convert_bytes(size: float) -> str:
    """``size`` bytes in the largest fitting unit: ``"1.5 MB"``."""
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if size < 1024.0:
            return f"{round(size, 2)} {unit}"
        size /= 1024.0
    return f"{round(size, 2)} PB"


def model_has_dtensor(model: nn.Module) -> bool:
    """True when some parameter of ``model`` is a ``DTensor`` (FSDP2 / tensor parallel)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


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


def _map_index(where: Any) -> int | None:
    if isinstance(where, torch.device):
        return where.index
    if isinstance(where, str):
        return torch.device(where).index if where not in ("disk", "meta") else None
    return int(where)


def check_quantized_placement(model: nn.Module, device: torch.device, distributed: bool) -> bool:
    """For a model loaded in 8-bit or 4-bit with a device map (``hf_device_map``), refuse the
    placements that cannot train, with a ``ValueError``; True when the model is such a model
    (it stays where its device map put it)."""
    quantized = getattr(model, "is_loaded_in_8bit", False) or getattr(
        model, "is_loaded_in_4bit", False
    )
    device_map = getattr(model, "hf_device_map", None)
    if not (quantized and device_map):
        return False
    places = set(device_map.values())
    if len(places) > 1 and distributed:
        raise ValueError(
            f"This model was loaded in 8-bit or 4-bit precision across several devices "
            f"({sorted(map(str, places))}); such a model cannot be trained by several "
            "processes. Load it on one device per process, e.g. "
            "device_map={'': accelerator.process_index}, or train it in one process."
        )
    cpu_ok = device.type == "cpu" and is_bitsandbytes_multi_backend_available()
    if "disk" in places or ("cpu" in places and not cpu_ok):
        raise ValueError(
            f"This model was loaded in 8-bit or 4-bit precision with CPU or disk offload "
            f"(hf_device_map places parts on {sorted(map(str, places))}); such a model cannot "
            "be trained. Load it entirely on the training device (device_map={'': device}), "
            "or, to train it on the CPU, install a bitsandbytes with several backends."
        )
    if len(places) == 1 and not cpu_ok:
        index = _map_index(next(iter(places)))
        loaded_on = torch.device(device.type) if index is None else torch.device(device.type, index)
        if loaded_on != device and (device.index is not None or index != 0):
            raise ValueError(
                f"This model was loaded in 8-bit or 4-bit precision on device {index}, but "
                f"this process trains on {device}. Load it on the training device, e.g. "
                "device_map={'': accelerator.device}."
            )
    return True
