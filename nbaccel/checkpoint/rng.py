"""The random number generators of one process as plain values and tensors, and back.

Python's and NumPy's states are converted to tensors and ints so the file loads with
``torch.load(weights_only=True)``; CUDA's is saved only where CUDA is initialised (reading it
would otherwise initialise CUDA), XLA's only where torch_xla is imported.
"""

from __future__ import annotations

import random
import sys
from typing import Any

import numpy as np
import torch

__all__ = ["capture_rng", "restore_rng"]


def capture_rng() -> dict[str, Any]:
    """Every RNG state of this process (Python, NumPy, torch, CUDA and XLA where present)."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    states: dict[str, Any] = {
        "python": {
            "version": int(version),
            "state": torch.tensor(internal, dtype=torch.int64),
            "gauss": gauss,
        },
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    if "torch_xla" in sys.modules:
        # torch_xla is installed on TPU hosts only
        import torch_xla.core.xla_model as xm

        states["xla"] = int(xm.get_rng_state())
    return states


def restore_rng(states: dict[str, Any]) -> None:
    """Put back what :func:`capture_rng` returned."""
    python = states["python"]
    internal = tuple(int(v) for v in python["state"].tolist())
    random.setstate((python["version"], internal, python["gauss"]))
    numpy_state = states["numpy"]
    np.random.set_state(
        (
            numpy_state["kind"],
            numpy_state["keys"].numpy().astype(np.uint32),
            numpy_state["pos"],
            numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )
    )
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    if "xla" in states and "torch_xla" in sys.modules:
        # torch_xla is installed on TPU hosts only
        import torch_xla.core.xla_model as xm

        xm.set_rng_state(states["xla"])
