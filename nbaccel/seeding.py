"""``set_seed``: one call seeds Python, NumPy, torch (and CUDA / XLA where present)."""

from __future__ import annotations

import random
import sys

import numpy as np
import torch

from .state import PartialState
from .validation import is_int

__all__ = ["set_seed"]


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seed every random number generator in use.

    Args:
        seed: the seed (a non-negative int).
        device_specific: add the process index to the seed, so each process draws differently.
        deterministic: also ask torch for deterministic algorithms.
    """
    if not is_int(seed):
        raise TypeError(f"set_seed(seed=...) must be an int, got {type(seed).__name__}.")
    if seed < 0:
        raise ValueError(f"set_seed(seed={seed}) must be non-negative.")
    if device_specific:
        seed += PartialState().process_index
    random.seed(seed)
    np.random.seed(seed % 2**32)
    # manual_seed also seeds CUDA lazily: it does not initialise CUDA.
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True)
    if "torch_xla" in sys.modules:
        # torch_xla is installed on TPU hosts only
        import torch_xla.core.xla_model as xm

        xm.set_rng_state(seed)
