"""Two FSDP flags that Accelerate's documentation promises: RAM-efficient loading tells
Transformers that FSDP is on, and XLA gradients count as synchronised under FSDP."""

from __future__ import annotations

import os
import warnings

import pytest

from nbaccel import Accelerator, GradientState
from nbaccel.fsdp import FullyShardedDataParallelPlugin
from nbaccel.utils import disable_fsdp_ram_efficient_loading, enable_fsdp_ram_efficient_loading


def test_enabling_ram_efficient_loading_sets_accelerate_use_fsdp_when_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    monkeypatch.delenv("FSDP_CPU_RAM_EFFICIENT_LOADING", raising=False)
    enable_fsdp_ram_efficient_loading()
    assert os.environ["ACCELERATE_USE_FSDP"] == "True"
    assert os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] == "True"
    disable_fsdp_ram_efficient_loading()
    assert os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] == "False"
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "false")
    enable_fsdp_ram_efficient_loading()
    assert os.environ["ACCELERATE_USE_FSDP"] == "false"  # a value already set stays


def test_xla_gradients_count_as_synced_under_fsdp() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a process on its own sets the plugin aside
        Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin())
    assert GradientState().is_xla_gradients_synced is True


def test_xla_gradients_are_not_synced_without_fsdp() -> None:
    Accelerator()
    assert GradientState().is_xla_gradients_synced is False
