"""``mixed_precision="fp16"`` where the device does not train in fp16 (the CPU): full precision,
one warning that names bf16, and ``"fp16"`` still reported, as Accelerate does; one rule for
``Accelerator``, ``AcceleratorState``, the config file and the launchers (the launched ranks
and the pool: tests/multiprocess/test_fp16_launch.py, tests/pool/test_pool_precision.py)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import accelerate
import pytest
import torch
from torch import nn

from nbaccel import Accelerator, AcceleratorState, GradScalerKwargs
from nbaccel.environment import (
    fp16_fallback_warning,
    fp16_unavailable_note,
    launch_variables,
    precision_in_effect,
    precision_warned_variables,
)
from nbaccel.launch.config import LaunchConfig
from nbaccel.precision import Precision

WARNING = fp16_fallback_warning("cpu")


@pytest.fixture
def accelerate_state() -> Iterator[None]:
    """Accelerate's own state, forgotten before and after the test."""
    accelerate.state.AcceleratorState._reset_state(reset_partial_state=True)
    yield
    accelerate.state.AcceleratorState._reset_state(reset_partial_state=True)


@pytest.fixture(autouse=True)
def _no_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("NBACCEL_CONFIG_FILE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)


def _fallback_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "runs in full precision" in str(w.message)]


def test_the_rule_keeps_fp16_where_the_device_trains_in_it() -> None:
    assert precision_in_effect("fp16", "cpu") == "no"
    for device in ("cuda", "xpu", "mps"):
        assert precision_in_effect("fp16", device) == "fp16"
    assert precision_in_effect("fp16", "xla") == "fp16"  # refused there, not replaced
    for other in ("no", "bf16", "fp8"):
        assert precision_in_effect(other, "cpu") == other
    assert fp16_unavailable_note("cpu") in WARNING and "mixed_precision='bf16'" in WARNING


def test_reported_as_accelerate_reports_it(accelerate_state: None) -> None:
    theirs = accelerate.Accelerator(mixed_precision="fp16", cpu=True)
    with pytest.warns(UserWarning) as caught:
        mine = Accelerator(mixed_precision="fp16", cpu=True)
    assert _fallback_warnings(caught.list) == [WARNING]
    assert caught[0].filename == __file__  # points at the line that built the Accelerator
    assert mine.mixed_precision == theirs.mixed_precision == "fp16"
    assert AcceleratorState().mixed_precision == theirs.state.mixed_precision == "fp16"
    assert mine.scaler is None and theirs.scaler is None
    with mine.autocast():
        assert not torch.is_autocast_enabled("cpu")
    model = mine.prepare(nn.Linear(2, 2))
    assert model(torch.ones(1, 2)).dtype == torch.float32
    assert model.weight.dtype == torch.float32


def test_a_config_file_that_says_fp16_meets_the_same_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text("mixed_precision: fp16\nuse_cpu: true\n")
    monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(path))
    with pytest.warns(UserWarning) as caught:
        accelerator = Accelerator(cpu=True)
    assert _fallback_warnings(caught.list) == [WARNING]
    assert accelerator.mixed_precision == "fp16" and accelerator.scaler is None


def test_the_state_built_directly_warns_once_and_later_views_do_not() -> None:
    with pytest.warns(UserWarning) as caught:
        state = AcceleratorState(mixed_precision="fp16", cpu=True)
        again = AcceleratorState(mixed_precision="fp16")
        assert AcceleratorState().mixed_precision == "fp16"
    assert _fallback_warnings(caught.list) == [WARNING]
    assert state.mixed_precision == again.mixed_precision == "fp16"


def test_a_process_whose_launcher_warned_in_the_notebook_stays_quiet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in precision_warned_variables().items():
        monkeypatch.setenv(name, value)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        accelerator = Accelerator(mixed_precision="fp16", cpu=True)
    assert _fallback_warnings(caught) == []
    assert accelerator.mixed_precision == "fp16" and accelerator.scaler is None
    variables = launch_variables(
        rank=1,
        world_size=2,
        local_rank=1,
        local_world_size=2,
        node_rank=0,
        master_addr="127.0.0.1",
        master_port=29500,
        precision_warned=True,
    )
    assert precision_warned_variables().items() <= variables.items()


def test_the_launchers_settings_warn_once_in_the_notebook() -> None:
    with pytest.warns(UserWarning) as caught:
        config = LaunchConfig.build(num_processes=2, mixed_precision="fp16", cpu=True)
    assert _fallback_warnings(caught.list) == [WARNING]
    assert config.mixed_precision == "fp16" and config.precision_falls_back
    with warnings.catch_warnings(record=True) as quiet:
        warnings.simplefilter("always")
        bf16 = LaunchConfig.build(num_processes=2, mixed_precision="bf16", cpu=True)
    assert _fallback_warnings(quiet) == [] and not bf16.precision_falls_back


def test_where_fp16_trains_the_scaler_takes_the_handlers_options() -> None:
    """The precision of a device that trains in fp16 (built here without one): autocast to
    float16 and a scaler made from GradScalerKwargs; the CPU's has neither."""
    options = GradScalerKwargs(init_scale=1024.0, growth_interval=7)
    for device in ("xpu", "mps"):
        precision = Precision("fp16", torch.device(device), scaler_kwargs=options)
        assert precision.dtype == torch.float16 and precision.scaler is not None
        assert precision.scaler.get_scale() == 1024.0
        assert precision.scaler.get_growth_interval() == 7
    cpu = Precision("fp16", torch.device("cpu"), scaler_kwargs=options)
    assert cpu.dtype is None and cpu.scaler is None
    assert Precision("bf16", torch.device("cpu")).dtype == torch.bfloat16
