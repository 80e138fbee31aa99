"""``accelerate.utils.save`` / ``load``: one object to or from one file, written by one
process per job (or per machine); plus the size helpers that go with files."""

from __future__ import annotations

import codecs
import collections
import re
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file

from ..enums import CustomDtype
from ..modeling import clean_state_dict_for_safetensors
from ..ops import recursively_apply
from ..state import PartialState

__all__ = ["convert_file_size_to_int", "dtype_byte_size", "load", "save"]

# numpy objects that torch.load(weights_only=True) may rebuild (RNG states hold them).
_NUMPY_CORE: Any = getattr(np, "_core", None) or np.core
_NUMPY_GLOBALS = [
    _NUMPY_CORE.multiarray._reconstruct,
    np.ndarray,
    np.dtype,
    type(np.dtype(np.uint32)),
    codecs.encode,
]
# Checked in this order (a longer unit before the one it ends with; "B" alone last).
_UNITS = {
    "TIB": 2**40,
    "GIB": 2**30,
    "MIB": 2**20,
    "KIB": 2**10,
    "TB": 10**12,
    "GB": 10**9,
    "MB": 10**6,
    "KB": 10**3,
    "B": 1,
}


def save(
    obj: Any, f: Any, save_on_each_node: bool = False, safe_serialization: bool = False
) -> None:
    """``torch.save`` (or safetensors' ``save_file`` with ``safe_serialization``) on the main
    process only, or on each machine's first process with ``save_on_each_node``; the other
    processes write nothing. Shared tensors of a state dict are written once under
    safetensors."""
    state = PartialState()
    writer = state.is_local_main_process if save_on_each_node else state.is_main_process
    if not writer:
        return
    if state.distributed_type == "XLA":
        obj = _to_cpu(obj)
    if safe_serialization:
        if isinstance(obj, collections.OrderedDict):
            obj = clean_state_dict_for_safetensors(obj)
        save_file(obj, f, metadata={"format": "pt"})
    else:
        torch.save(obj, f)


def _to_cpu(obj: Any) -> Any:

    return recursively_apply(lambda t: t.cpu(), obj)


def load(f: Any, map_location: Any = None, **kwargs: Any) -> Any:
    """``torch.load`` with ``weights_only=True`` unless given, accepting numpy arrays (as in
    saved RNG states) besides tensors and plain containers."""
    kwargs.setdefault("weights_only", True)
    if not kwargs["weights_only"]:
        return torch.load(f, map_location=map_location, **kwargs)
    with torch.serialization.safe_globals(_NUMPY_GLOBALS):
        return torch.load(f, map_location=map_location, **kwargs)


def convert_file_size_to_int(size: int | str) -> int:
    """Bytes in ``size``: an int, or ``"5GB"`` (10**9 units), ``"5GiB"`` (2**30 units); a
    lower-case ``b`` (``"5Gb"``) means bits. The one size parser of nbaccel (``save_model``'s
    ``max_shard_size`` too), reading sizes as Accelerate's does."""
    if isinstance(size, int):
        if size < 0:
            raise ValueError(f"`size` {size} is negative; give a number of bytes.")
        return size
    upper = str(size).upper()
    for unit, factor in _UNITS.items():
        if upper.endswith(unit):
            try:
                value = int(float(size[: -len(unit)]) * factor)
            except ValueError:
                break
            if value < 0:
                break
            return value // 8 if unit.endswith("B") and size.endswith("b") else value
    raise ValueError(
        f"`size` {size} is not in a valid format. Use an integer for bytes, or a string with "
        "a unit (like '5.0GB')."
    )


def dtype_byte_size(dtype: torch.dtype | CustomDtype) -> float:
    """Bytes one element of ``dtype`` takes (``torch.bool``: 1/8; int4: 1/2; fp8: 1)."""
    special = {torch.bool: 1 / 8, CustomDtype.INT2: 1 / 4, CustomDtype.INT4: 1 / 2}
    if dtype in special:
        return special[dtype]
    if dtype == CustomDtype.FP8 or "float8" in str(dtype):
        return 1
    bits = re.search(r"[^\d](\d+)$", str(dtype))
    if bits is None:
        raise ValueError(f"`dtype` is not a valid dtype: {dtype}.")
    return int(bits.group(1)) // 8
