"""The xla tier: nbaccel against the real torch_xla on its CPU device (``PJRT_DEVICE=CPU``).

It runs in its own virtual environment (torch 2.9.0, torch-xla 2.9.0; tests/xla/make_env.sh
builds it and tests/run.sh runs the tier with its python). One torch_xla CPU device stands in
for one TPU core: what needs several cores stays with the stand-in package
(tests/multiprocess/test_xla_standin.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nbaccel.testing import reset_state


@pytest.fixture(scope="session", autouse=True)
def _xla_runtime_first() -> None:
    """Start torch_xla's runtime before any test runs a CPU backward pass: torch's autograd
    engine sizes its per-device queues at the first backward of the process, and an XLA device
    that was not up by then fails every later backward on it (an internal assert in torch)."""
    import torch
    import torch_xla

    (torch.ones(1, device=torch_xla.device()) + 1).cpu()


@pytest.fixture(autouse=True)
def _xla_cpu_device(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Ask for the XLA path on torch_xla's CPU device (the root conftest cleared PJRT_DEVICE)."""
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    reset_state()
    yield
    reset_state()
