"""Choosing the XLA path: PJRT_DEVICE (or a TPU) asks for it; nothing else imports torch_xla."""

from __future__ import annotations

import json

import pytest
import torch
import torch_xla
from xla_helpers import run_script

from nbaccel import Accelerator, DistributedType, PartialState
from nbaccel.environment import xla_available, xla_requested
from nbaccel.launch.config import LaunchConfig


def test_the_tier_runs_torch_2_9_with_the_real_torch_xla() -> None:
    assert torch.__version__.split("+")[0] == "2.9.0"
    assert torch_xla.__version__.split("+")[0] == "2.9.0"
    assert hasattr(torch_xla, "_XLAC")  # the real extension, not the stand-in package


def test_pjrt_device_cpu_selects_the_xla_path_and_device() -> None:
    assert xla_requested() and xla_available()
    state = PartialState()
    assert state.distributed_type == DistributedType.XLA
    assert state.device.type == "xla" and str(state.device) == "xla:0"
    assert (state.num_processes, state.process_index, state.local_process_index) == (1, 0, 0)
    assert Accelerator().device == state.device
    assert LaunchConfig.build().accelerator == "xla"
    # cpu=True keeps the plain CPU path even with torch_xla installed and requested
    assert LaunchConfig.build(cpu=True).accelerator == "cpu"


def test_use_torch_xla_0_turns_the_xla_path_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("USE_TORCH_XLA", "0")
    assert not xla_available()
    state = PartialState()
    assert state.distributed_type == DistributedType.NO and state.device.type == "cpu"


_PROBE = """
import json, sys
from nbaccel import PartialState, Accelerator
from nbaccel.launch.config import LaunchConfig
state = PartialState()
acc = Accelerator()
print(json.dumps([str(state.distributed_type), str(state.device), str(acc.device),
                  LaunchConfig.build().accelerator, "torch_xla" in sys.modules]))
"""


def test_without_pjrt_device_or_a_tpu_torch_xla_is_never_imported() -> None:
    out = run_script(_PROBE, {})
    assert json.loads(out.splitlines()[-1]) == ["NO", "cpu", "cpu", "cpu", False]
