"""Step marking for torch_xla's lazy tensors, done by prepared loaders on the XLA device.

On the XLA device operations are recorded, not run, until a step is marked; the recorded graph
of a training loop would otherwise grow with every batch. As torch_xla's own device loader
does (and Accelerate through it), a prepared loader marks a step before each batch it yields
and at the end of a pass. ``torch_xla`` is imported only when the device is an XLA device.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["step_marker"]


def step_marker(device: torch.device | None) -> Callable[[], None] | None:
    """The function that marks an XLA step, or None off the XLA device."""
    if device is None or device.type != "xla":
        return None
    # torch_xla is installed on TPU hosts only
    import torch_xla

    mark: Callable[[], None] | None = getattr(torch_xla, "sync", None)  # torch_xla 2.6+
    if mark is None:
        # torch_xla is installed on TPU hosts only
        import torch_xla.core.xla_model as xm

        mark = xm.mark_step
    return mark
