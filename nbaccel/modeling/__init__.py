"""Model helpers: moving a model and keeping its tied weights tied, ``torch.compile`` regions,
unwrapping what ``prepare`` wrapped, creating models on the meta device, the checks ``prepare``
runs on quantized models, and big-model inference (device maps, CPU and disk offload: the
modules ``hooks``, ``aligning``, ``offload``, ``offloaded``, ``offload_store``, ``tensors`` and
``device_map``)."""

from .compiled import compile_regions, has_compiled_regions, is_compiled_module, recompiled
from .creation import init_empty_weights, init_on_device
from .hooks import remove_hook_from_module
from .moves import ParameterMoves, find_tied_parameters, move_model_to_device, retie_parameters
from .offloaded import has_offloaded_params
from .quantized import check_quantized_placement
from .storage import clean_state_dict_for_safetensors, id_tensor_storage
from .unwrap import extract_model_from_parallel, is_peft_model, model_has_dtensor
from .walk import get_module_children_bottom_up, recursive_getattr

__all__ = [
    "ParameterMoves",
    "check_quantized_placement",
    "clean_state_dict_for_safetensors",
    "compile_regions",
    "extract_model_from_parallel",
    "find_tied_parameters",
    "get_module_children_bottom_up",
    "has_compiled_regions",
    "has_offloaded_params",
    "id_tensor_storage",
    "init_empty_weights",
    "init_on_device",
    "is_compiled_module",
    "is_peft_model",
    "model_has_dtensor",
    "move_model_to_device",
    "recompiled",
    "recursive_getattr",
    "remove_hook_from_module",
    "retie_parameters",
]
