"""``WorkerPool(mixed_precision="fp16")`` on CPU ranks: the launcher's rule and warning, once,
in the notebook's process; the ranks report ``"fp16"`` and train in fp32."""

from __future__ import annotations

import warnings

import pytest

from nbaccel import WorkerPool
from nbaccel.environment import fp16_fallback_warning

pytestmark = pytest.mark.multiprocess


def _step() -> dict[str, object]:
    import torch

    from nbaccel import Accelerator

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        accelerator = Accelerator()  # the pool's precision
    model = accelerator.prepare(torch.nn.Linear(3, 1))
    with accelerator.autocast():
        autocast_on = torch.is_autocast_enabled("cpu")
        out = model(torch.ones(2, 3))
    return {
        "reported": accelerator.mixed_precision,
        "autocast_on": autocast_on,
        "output": str(out.dtype),
        "scaler": accelerator.scaler is not None,
        "warnings": [str(w.message) for w in caught if "full precision" in str(w.message)],
    }


def test_a_pool_asked_for_fp16_on_cpus_warns_once_and_trains_in_fp32(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pool = WorkerPool(2, mixed_precision="fp16", cpu=True, grace_period=3.0)
    with pool:
        seen = pool.run(_step)
    said = [str(w.message) for w in caught if "runs in full precision" in str(w.message)]
    assert said == [fp16_fallback_warning("cpu")]
    expected = {
        "reported": "fp16",
        "autocast_on": False,
        "output": "torch.float32",
        "scaler": False,
        "warnings": [],
    }
    assert seen == [expected, expected]
    out, err = capfd.readouterr()
    assert "runs in full precision" not in out + err  # no rank repeated it
