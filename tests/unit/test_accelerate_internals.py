"""Accelerate internals that code and tests touch: state views and resets, devices, pickling."""

from __future__ import annotations

import logging
import pickle

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from nbaccel import (
    Accelerator,
    AcceleratorState,
    DistributedType,
    FullyShardedDataParallelPlugin,
    GradientAccumulationPlugin,
    GradientState,
    PartialState,
)
from nbaccel.data_loader import DataLoaderShard, skip_first_batches
from nbaccel.state import is_initialized
from nbaccel.utils import convert_dict_to_env_variables


def test_partial_shared_state_is_empty_until_set_up_and_reads_the_state() -> None:
    assert PartialState._shared_state == {}
    assert not PartialState._shared_state
    state = PartialState(cpu=True)
    shared = PartialState._shared_state
    assert shared != {}
    assert state._shared_state is shared  # the same view on the class and on instances
    assert shared["_cpu"] is True
    assert shared["device"] == state.device == torch.device("cpu")
    assert shared["distributed_type"] == DistributedType.NO
    assert shared["num_processes"] == 1 and shared["process_index"] == 0
    with pytest.raises(TypeError, match="read-only"):
        shared["device"] = torch.device("meta")
    shared.clear()
    assert PartialState._shared_state == {}
    assert state.initialized is False


def test_accelerator_shared_state_follows_its_own_record() -> None:
    PartialState(cpu=True)
    assert AcceleratorState._shared_state == {}  # the process part alone is not enough
    Accelerator(cpu=True, mixed_precision="bf16")
    shared = AcceleratorState._shared_state
    assert shared["_mixed_precision"] == "bf16"
    assert shared["device"] == torch.device("cpu")
    assert shared["fsdp_plugin"] is None
    AcceleratorState._reset_state()
    assert AcceleratorState._shared_state == {}
    assert PartialState._shared_state != {}  # kept, as in Accelerate
    AcceleratorState._reset_state(reset_partial_state=True)
    assert PartialState._shared_state == {}


def test_is_initialized_follows_the_accelerator_state() -> None:
    PartialState(cpu=True)
    assert is_initialized() is False
    Accelerator(cpu=True)
    assert is_initialized() is True
    AcceleratorState._reset_state()
    assert is_initialized() is False


def test_gradient_state_reset_starts_from_the_defaults() -> None:
    assert GradientState._shared_state == {}
    state = GradientState(GradientAccumulationPlugin(num_steps=4))
    state.sync_gradients = False
    assert GradientState._shared_state["plugin_kwargs"]["num_steps"] == 4
    assert GradientState._shared_state["sync_gradients"] is False
    GradientState._reset_state()
    assert GradientState._shared_state == {}
    fresh = GradientState()
    assert fresh.num_steps == 1 and fresh.sync_gradients is True


def test_partial_state_read_after_reset_raises_attribute_error() -> None:
    state = PartialState(cpu=True)
    with pytest.raises(AttributeError) as plain:
        _ = state.someotherthing
    assert str(plain.value) == "'PartialState' object has no attribute 'someotherthing'"
    PartialState._reset_state()
    with pytest.raises(AttributeError) as after:
        _ = state.num_processes
    message = str(after.value)
    assert "`PartialState` object has no attribute `num_processes`" in message
    assert "`PartialState._reset_state()`" in message
    with pytest.raises(RuntimeError, match="reset"):  # nbaccel's own error type is kept
        _ = state.device
    state.someotherthing = "MyValue"  # not a state attribute: an ordinary instance attribute
    assert state.someotherthing == "MyValue"


def test_accelerator_state_read_after_its_reset_raises_attribute_error() -> None:
    accelerator = Accelerator(cpu=True)
    partial = PartialState()
    AcceleratorState._reset_state()
    with pytest.raises(AttributeError, match=r"`AcceleratorState\._reset_state\(\)`"):
        _ = accelerator.num_processes
    with pytest.raises(AttributeError, match="`AcceleratorState` object has no attribute"):
        _ = accelerator.state.device
    assert partial.num_processes == 1  # the process state itself was kept
    assert Accelerator(cpu=True).state.num_processes == 1


@pytest.mark.parametrize("name", ["ACCELERATE_TORCH_DEVICE", "NBACCEL_TORCH_DEVICE"])
def test_torch_device_variable_names_the_device(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(name, "cpu:3")
    accelerator = Accelerator()
    assert accelerator.device == torch.device("cpu", 3)
    assert str(PartialState._shared_state["device"]) == "cpu:3"


def test_torch_device_variable_that_is_not_a_device_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "not-a-device")
    with pytest.raises(ValueError, match="ACCELERATE_TORCH_DEVICE='not-a-device'"):
        PartialState()


def test_environment_helpers_warn_on_accelerates_logger(caplog: pytest.LogCaptureFixture) -> None:
    env = {"GOOD": "1", "BAD_NAME": "<x", "OTHER": "2"}
    with caplog.at_level(logging.WARNING, logger="accelerate.utils.environment"):
        lines = convert_dict_to_env_variables(env)
    assert lines == ["GOOD=1\n", "OTHER=2\n"]
    assert [r.name for r in caplog.records] == ["accelerate.utils.environment"]
    assert "BAD_NAME" in caplog.records[0].getMessage()


def test_prepared_accelerator_pickles_with_its_data_loaders() -> None:
    loader = DataLoader(TensorDataset(torch.arange(10)), batch_size=2)
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(nn.Linear(1, 1), loader, skip_first_batches(loader, 2))
    loaded = pickle.loads(pickle.dumps(accelerator))
    assert len(loaded._dataloaders) == 2
    assert isinstance(loaded._dataloaders[0], DataLoaderShard)
    assert [b[0].tolist() for b in loaded._dataloaders[1]] == [[4, 5], [6, 7], [8, 9]]
    with pytest.raises(ValueError, match="already prepared"):  # the bookkeeping came along
        loaded.prepare(loaded._dataloaders[0])
    assert loaded.prepare(loaded._models[0]) is loaded._models[0]


def _quantized(bits: int, device_map: dict[str, object]) -> nn.Module:
    model = nn.Linear(2, 2)
    setattr(model, f"is_loaded_in_{bits}bit", True)
    model.hf_device_map = device_map  # type: ignore[assignment]
    return model


@pytest.mark.parametrize("device_map", [{"": "cpu"}, {"a": 0, "b": "disk"}, {"": "disk"}], ids=str)
def test_quantized_model_with_offload_is_a_value_error(device_map: dict[str, object]) -> None:
    accelerator = Accelerator(cpu=True)
    with pytest.raises(ValueError, match="CPU or disk offload"):
        accelerator.prepare_model(_quantized(8, device_map))


def test_quantized_model_on_one_device_stays_where_its_map_put_it() -> None:
    accelerator = Accelerator(cpu=True)
    model = _quantized(4, {"": 0}).to(torch.float64)
    prepared = accelerator.prepare_model(model)
    assert prepared is model
    assert prepared.weight.dtype == torch.float64  # left as loaded


def test_fsdp_activation_checkpointing_offload_is_checked() -> None:
    with pytest.raises(ValueError, match="needs activation_checkpointing=True"):
        FullyShardedDataParallelPlugin(fsdp_version=2, activation_checkpointing_offload=True)
    with pytest.raises(ValueError, match="fsdp_version=2"):
        FullyShardedDataParallelPlugin(
            fsdp_version=1, activation_checkpointing=True, activation_checkpointing_offload=True
        )
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2, activation_checkpointing=True, activation_checkpointing_offload=True
    )
    assert plugin.activation_checkpointing_offload is True
    assert FullyShardedDataParallelPlugin().activation_checkpointing_offload is False


def test_fsdp_offload_setting_comes_from_accelerates_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    monkeypatch.setenv("FSDP_ACTIVATION_CHECKPOINTING", "true")
    monkeypatch.setenv("FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD", "true")
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.activation_checkpointing and plugin.activation_checkpointing_offload


def test_fsdp_plugin_nbaccel_fields_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        FullyShardedDataParallelPlugin(*([None] * 22))  # one past Accelerate's 21 fields
    assert FullyShardedDataParallelPlugin(fsdp_group_size=1).fsdp_group_size == 1
