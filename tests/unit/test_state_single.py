"""Unit tests for PartialState, AcceleratorState and GradientState on a single process."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from datetime import timedelta

import numpy as np
import pytest
import torch
import torch.distributed as dist

import nbaccel
from nbaccel import (
    AcceleratorState,
    DistributedType,
    GradientAccumulationPlugin,
    GradientState,
    InitProcessGroupKwargs,
    PartialState,
    TorchDynamoPlugin,
    set_seed,
)
from nbaccel.environment import cuda_device_count
from nbaccel.testing import reset_state

on_cpu_only = pytest.mark.skipif(cuda_device_count() > 0, reason="a CUDA device is present")

PROCESS_ATTRIBUTES = (
    "device",
    "default_device",
    "backend",
    "distributed_type",
    "num_processes",
    "process_index",
    "local_process_index",
    "local_num_processes",
    "is_main_process",
    "is_local_main_process",
    "is_last_process",
    "use_distributed",
    "mixed_precision",
    "debug",
    "fork_launched",
    "restart_count",
    "initialized",
)
ACCELERATOR_ATTRIBUTES = (
    *PROCESS_ATTRIBUTES,
    "fsdp_plugin",
    "dynamo_plugin",
    "deepspeed_plugin",
    "megatron_lm_plugin",
    "torch_tp_plugin",
    "is_fsdp2",
)
# settable on AcceleratorState as in Accelerate, whose tests set them (debug on PartialState
# too): tests/unit/test_state_settable.py
SETTABLE = ("debug", "distributed_type")
GRADIENT_ATTRIBUTES = (
    "end_of_dataloader",
    "remainder",
    "sync_gradients",
    "active_dataloader",
    "dataloader_references",
    "num_steps",
    "adjust_scheduler",
    "sync_with_dataloader",
    "sync_each_batch",
    "plugin_kwargs",
    "in_dataloader",
    "initialized",
)


@dataclasses.dataclass
class FakeFsdpPlugin:
    """Stands in for FullyShardedDataParallelPlugin, which this foundation does not define."""

    fsdp_version: int = 1


# --- PartialState -----------------------------------------------------------------------------


@on_cpu_only
def test_partial_state_attributes_on_one_process() -> None:
    state = PartialState()
    assert state.device == torch.device("cpu")
    assert state.default_device == torch.device("cpu")
    assert state.backend is None
    assert state.distributed_type == DistributedType.NO
    assert state.num_processes == 1
    assert state.process_index == 0
    assert state.local_process_index == 0
    assert state.local_num_processes == 1
    assert state.is_main_process is True
    assert state.is_local_main_process is True
    assert state.is_last_process is True
    assert state.use_distributed is False
    assert state.mixed_precision == "no"
    assert state.debug is False
    assert state.fork_launched is False
    assert state.restart_count == 0
    assert state.initialized is True
    assert not dist.is_initialized()


@on_cpu_only
def test_partial_state_repr_describes_the_process() -> None:
    text = repr(PartialState())
    assert "Distributed environment: NO" in text
    assert "Num processes: 1" in text
    assert "Process index: 0" in text
    assert "Device: cpu" in text
    assert "Mixed precision type: no" in text


@pytest.mark.parametrize("name", [n for n in PROCESS_ATTRIBUTES if n != "debug"])
def test_partial_state_attributes_are_read_only(name: str) -> None:
    state = PartialState()
    before = getattr(state, name)
    with pytest.raises(AttributeError):
        setattr(state, name, before)
    assert getattr(PartialState(), name) == before


def test_partial_state_is_shared_and_set_up_by_the_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBACCEL_DEBUG_MODE", "1")
    monkeypatch.setenv("NBACCEL_MIXED_PRECISION", "bf16")
    monkeypatch.setenv("NBACCEL_RESTART_COUNT", "2")
    first = PartialState()
    monkeypatch.delenv("NBACCEL_DEBUG_MODE")
    monkeypatch.delenv("NBACCEL_MIXED_PRECISION")
    monkeypatch.setenv("NBACCEL_RESTART_COUNT", "7")
    second = PartialState()
    for state in (first, second):
        assert state.debug is True
        assert state.mixed_precision == "bf16"
        assert state.restart_count == 2
    assert first.device == second.device


def test_reset_state_makes_the_next_instance_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBACCEL_RESTART_COUNT", "1")
    old = PartialState()
    assert old.restart_count == 1
    reset_state()
    assert old.initialized is False
    with pytest.raises(RuntimeError, match="reset"):
        _ = old.process_index
    monkeypatch.setenv("NBACCEL_RESTART_COUNT", "3")
    assert PartialState().restart_count == 3


def test_partial_state_cpu_true() -> None:
    state = PartialState(cpu=True)
    assert state.device == torch.device("cpu")
    assert state.distributed_type == DistributedType.NO
    assert PartialState().device == torch.device("cpu")
    assert PartialState(cpu=True).device == torch.device("cpu")


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_partial_state_cpu_must_be_bool(bad: object) -> None:
    with pytest.raises(TypeError, match="cpu"):
        PartialState(cpu=bad)  # type: ignore[arg-type]


def test_partial_state_unknown_keyword_is_type_error() -> None:
    with pytest.raises(TypeError, match="mixed_precision"):
        PartialState(mixed_precision="fp16")
    PartialState()
    with pytest.raises(TypeError, match="world_size"):
        PartialState(world_size=2)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout": 30},
        {"timeout": 12.5},
        {"timeout": timedelta(minutes=5)},
        {"backend": "gloo"},
        {"init_method": "env://"},
        InitProcessGroupKwargs(backend="gloo", timeout=60).to_kwargs(),
    ],
)
def test_partial_state_accepts_process_group_kwargs(kwargs: dict) -> None:
    state = PartialState(**kwargs)
    assert state.num_processes == 1


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"timeout": -5}, ValueError),
        ({"timeout": "30s"}, TypeError),
        ({"backend": "carrier-pigeon"}, ValueError),
        ({"backend": 3}, TypeError),
    ],
)
def test_partial_state_rejects_bad_process_group_kwargs(kwargs: dict, error: type) -> None:
    with pytest.raises(error):
        PartialState(**kwargs)
    PartialState()
    with pytest.raises(error):
        PartialState(**kwargs)


# --- AcceleratorState -------------------------------------------------------------------------


@on_cpu_only
def test_accelerator_state_attributes_on_one_process() -> None:
    state = AcceleratorState()
    assert state.initialized is True
    assert state.device == torch.device("cpu")
    assert state.distributed_type == DistributedType.NO
    assert state.num_processes == 1
    assert state.process_index == 0
    assert state.local_process_index == 0
    assert state.is_main_process and state.is_local_main_process and state.is_last_process
    assert state.mixed_precision == "no"
    assert state.debug is False
    assert state.fsdp_plugin is None
    assert state.dynamo_plugin is None
    assert state.deepspeed_plugin is None
    assert state.megatron_lm_plugin is None
    assert state.torch_tp_plugin is None
    assert state.is_fsdp2 is False
    assert PartialState().initialized is True


@pytest.mark.parametrize("name", [n for n in ACCELERATOR_ATTRIBUTES if n not in SETTABLE])
def test_accelerator_state_attributes_are_read_only(name: str) -> None:
    state = AcceleratorState()
    before = getattr(state, name)
    with pytest.raises(AttributeError):
        setattr(state, name, before)


def test_accelerator_state_initialized_tracks_the_accelerator_record() -> None:
    state = AcceleratorState()
    partial = PartialState()
    assert state.initialized is True
    AcceleratorState._reset_state()
    assert state.initialized is False
    assert partial.initialized is True  # the process part is kept
    AcceleratorState._reset_state(reset_partial_state=True)
    assert partial.initialized is False


@pytest.mark.parametrize(
    ("given", "expected"),
    [("no", "no"), ("fp16", "fp16"), ("bf16", "bf16"), ("fp8", "fp8"), ("BF16", "bf16")],
)
def test_accelerator_state_mixed_precision(given: str, expected: str) -> None:
    state = AcceleratorState(mixed_precision=given)
    assert state.mixed_precision == expected
    assert isinstance(state.mixed_precision, str)
    assert PartialState().mixed_precision == expected


@pytest.mark.parametrize("bad", ["fp32", "half", 16, ""])
def test_accelerator_state_rejects_bad_mixed_precision(bad: object) -> None:
    with pytest.raises(ValueError, match="mixed_precision"):
        AcceleratorState(mixed_precision=bad)  # type: ignore[arg-type]


def test_accelerator_state_takes_launcher_precision(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBACCEL_MIXED_PRECISION", "bf16")
    assert AcceleratorState().mixed_precision == "bf16"
    reset_state()
    assert AcceleratorState(mixed_precision="fp16").mixed_precision == "fp16"


def test_accelerator_state_cannot_change_after_init() -> None:
    AcceleratorState(mixed_precision="fp16")
    with pytest.raises(ValueError, match="cannot change"):
        AcceleratorState(mixed_precision="bf16")
    assert AcceleratorState(mixed_precision="fp16").mixed_precision == "fp16"
    assert AcceleratorState().mixed_precision == "fp16"
    with pytest.raises(ValueError, match="dynamo_plugin"):
        AcceleratorState(dynamo_plugin=TorchDynamoPlugin(backend="inductor"))


def test_accelerator_state_is_shared() -> None:
    dynamo = TorchDynamoPlugin(backend="eager")
    first = AcceleratorState(mixed_precision="bf16", dynamo_plugin=dynamo)
    second = AcceleratorState()
    assert second.mixed_precision == "bf16"
    assert second.dynamo_plugin is dynamo
    assert first.dynamo_plugin is dynamo


@pytest.mark.parametrize("name", ["megatron_lm_plugin", "torch_tp_plugin"])
def test_unsupported_plugins_raise_not_implemented(name: str) -> None:
    with pytest.raises(NotImplementedError, match=name):
        AcceleratorState(**{name: object()})


def test_a_deepspeed_plugin_must_be_one_and_names_the_type_it_got() -> None:
    with pytest.raises(TypeError, match=r"deepspeed_plugin must be a DeepSpeedPlugin.*object"):
        AcceleratorState(deepspeed_plugin=object())


def test_without_deepspeed_the_plugin_questions_say_so() -> None:
    state = AcceleratorState()
    assert state.deepspeed_plugin is None and state.deepspeed_plugins is None
    with pytest.raises(ValueError, match=r"get_deepspeed_plugin\('student'\): DeepSpeed is not"):
        state.get_deepspeed_plugin("student")
    with pytest.raises(ValueError, match="not in use"):
        state.select_deepspeed_plugin("teacher")


@pytest.fixture
def launched_alone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as torchrun starts a job of one process; the process group of one that
    FSDP makes it join is destroyed afterwards."""
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    yield
    reset_state(destroy_process_group=True)


@on_cpu_only
def test_fsdp_plugin_makes_distributed_type_fsdp_in_a_launched_process(
    launched_alone: None,
) -> None:
    plugin = FakeFsdpPlugin()
    state = AcceleratorState(fsdp_plugin=plugin)
    assert state.fsdp_plugin is plugin
    assert state.distributed_type == DistributedType.FSDP
    assert PartialState().distributed_type == DistributedType.FSDP
    assert state.is_fsdp2 is False
    assert GradientState().is_xla_gradients_synced is True
    assert dist.is_initialized() and dist.get_world_size() == 1  # FSDP's group of one
    assert state.backend == "gloo"
    with pytest.raises(ValueError, match="fsdp_plugin"):
        AcceleratorState(fsdp_plugin=FakeFsdpPlugin(fsdp_version=2))


def test_fsdp2_plugin_is_reported(launched_alone: None) -> None:
    assert AcceleratorState(fsdp_plugin=FakeFsdpPlugin(fsdp_version=2)).is_fsdp2 is True


def test_accelerator_state_rejects_unknown_keyword() -> None:
    with pytest.raises(TypeError):
        AcceleratorState(gradient_accumulation_steps=2)


# --- DistributedType --------------------------------------------------------------------------


def test_distributed_type_members() -> None:
    names = set(DistributedType.__members__)
    assert {"NO", "MULTI_CPU", "MULTI_GPU", "FSDP", "XLA", "TPU", "DEEPSPEED", "MEGATRON_LM"} <= (
        names
    )
    assert DistributedType.TPU is DistributedType.XLA
    assert DistributedType.TPU == DistributedType.XLA
    assert DistributedType.XLA == "XLA"
    assert DistributedType.MULTI_CPU == "MULTI_CPU"
    assert str(DistributedType.FSDP) == "FSDP"
    assert DistributedType("XLA") is DistributedType.TPU
    assert len({m.value for m in DistributedType}) == len(list(DistributedType))


# --- GradientState ----------------------------------------------------------------------------


def test_gradient_state_defaults() -> None:
    state = GradientState()
    assert state.initialized is True
    assert state.end_of_dataloader is False
    assert state.remainder == -1
    assert state.sync_gradients is True
    assert state.active_dataloader is None
    assert state.dataloader_references == [None]
    assert state.in_dataloader is False
    assert state.num_steps == 1
    assert state.adjust_scheduler is True
    assert state.sync_with_dataloader is True
    assert state.sync_each_batch is False
    assert state.is_xla_gradients_synced is False
    assert state.plugin_kwargs == {
        "num_steps": 1,
        "adjust_scheduler": True,
        "sync_with_dataloader": True,
        "sync_each_batch": False,
    }
    assert "Sync Gradients: True" in repr(state)


def test_gradient_state_with_plugin() -> None:
    plugin = GradientAccumulationPlugin(
        num_steps=4, adjust_scheduler=False, sync_with_dataloader=False, sync_each_batch=True
    )
    state = GradientState(gradient_accumulation_plugin=plugin)
    assert state.num_steps == 4
    assert state.adjust_scheduler is False
    assert state.sync_with_dataloader is False
    assert state.sync_each_batch is True
    assert state.plugin_kwargs["num_steps"] == 4
    assert GradientState().num_steps == 4  # shared


def test_gradient_state_later_plugin_replaces_settings_keeps_counters() -> None:
    first = GradientState(GradientAccumulationPlugin(num_steps=2))
    first._set_sync_gradients(False)
    second = GradientState(GradientAccumulationPlugin(num_steps=8))
    assert first.num_steps == 8 and second.num_steps == 8
    assert second.sync_gradients is False
    assert first.sync_gradients is False


def test_gradient_state_rejects_non_plugin() -> None:
    with pytest.raises(TypeError, match="GradientAccumulationPlugin"):
        GradientState(gradient_accumulation_plugin={"num_steps": 2})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name", [n for n in GRADIENT_ATTRIBUTES if n not in ("initialized", "sync_gradients")]
)
def test_gradient_state_attributes_are_read_only(name: str) -> None:
    state = GradientState()
    with pytest.raises(AttributeError):
        setattr(state, name, getattr(state, name))


def test_gradient_state_sync_gradients_is_settable_and_shared() -> None:
    """As in Accelerate (Accelerator.sync_gradients sets it too)."""
    GradientState().sync_gradients = False
    assert GradientState().sync_gradients is False
    GradientState().sync_gradients = True
    assert GradientState().sync_gradients is True


def test_gradient_state_xla_flag_is_settable_and_shared() -> None:
    state = GradientState()
    state.is_xla_gradients_synced = True
    assert GradientState().is_xla_gradients_synced is True
    state.is_xla_gradients_synced = False
    assert GradientState().is_xla_gradients_synced is False


def test_gradient_state_follows_the_active_dataloader() -> None:
    class Loader:
        end_of_dataloader = True
        remainder = 3

    state = GradientState()
    outer, inner = Loader(), Loader()
    inner.end_of_dataloader = False
    state._add_dataloader(outer)
    assert state.active_dataloader is outer
    assert state.in_dataloader is True
    assert state.end_of_dataloader is True
    assert state.remainder == 3
    state._add_dataloader(inner)
    assert state.dataloader_references == [None, outer, inner]
    assert GradientState().end_of_dataloader is False
    state._remove_dataloader(inner)
    assert state.active_dataloader is outer
    state._remove_dataloader(outer)
    assert state.active_dataloader is None
    assert state.dataloader_references == [None]
    assert state.end_of_dataloader is False
    assert state.remainder == -1


# --- decorators and helpers on one process ----------------------------------------------------


def test_decorators_run_on_the_only_process() -> None:
    state = PartialState()
    calls: list[str] = []

    @state.on_main_process
    def main(x: int) -> int:
        calls.append("main")
        return x + 1

    @state.on_local_main_process
    def local_main() -> str:
        calls.append("local_main")
        return "lm"

    @state.on_last_process
    def last() -> str:
        calls.append("last")
        return "last"

    @state.on_process(process_index=0)
    def zero() -> str:
        calls.append("zero")
        return "zero"

    @state.on_local_process(local_process_index=0)
    def local_zero() -> str:
        calls.append("local_zero")
        return "local_zero"

    assert main(1) == 2
    assert local_main() == "lm"
    assert last() == "last"
    assert zero() == "zero"
    assert local_zero() == "local_zero"
    assert calls == ["main", "local_main", "last", "zero", "local_zero"]
    assert main.__name__ == "main"
    assert state.on_process(lambda: 7, process_index=0)() == 7


def test_on_process_out_of_range_on_one_process() -> None:
    state = PartialState()
    with pytest.raises(ValueError, match="process_index"):
        state.on_process(process_index=5)
    with pytest.raises(ValueError, match="process_index"):
        state.on_process(process_index=1)
    with pytest.raises(ValueError, match="process_index"):
        state.on_process(process_index=-1)
    with pytest.raises(ValueError, match="local_process_index"):
        state.on_local_process(local_process_index=1)


@pytest.mark.parametrize("bad", ["1", "0", 0.0, True])
def test_on_process_index_must_be_int(bad: object) -> None:
    state = PartialState()
    with pytest.raises(TypeError, match="process_index"):
        state.on_process(process_index=bad)
    with pytest.raises(TypeError, match="local_process_index"):
        state.on_local_process(local_process_index=bad)


def test_decorators_need_an_index_and_a_function() -> None:
    state = PartialState()
    with pytest.raises(TypeError, match="process_index"):
        state.on_process(lambda: None)
    with pytest.raises(TypeError, match="local_process_index"):
        state.on_local_process(lambda: None)
    with pytest.raises(TypeError):
        state.on_main_process(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "inputs",
    [["A", "B", "C"], ("A", "B"), {"a": [1, 2, 3], "b": [4, 5, 6]}, torch.arange(5), []],
)
@pytest.mark.parametrize("apply_padding", [False, True])
def test_split_between_processes_on_one_process_returns_input(
    inputs: object, apply_padding: bool
) -> None:
    state = PartialState()
    with state.split_between_processes(inputs, apply_padding=apply_padding) as share:
        assert share is inputs


def test_split_between_processes_apply_padding_must_be_bool() -> None:
    with (
        pytest.raises(TypeError, match="apply_padding"),
        PartialState().split_between_processes([1, 2], apply_padding="yes"),  # type: ignore[arg-type]
    ):
        pass


def test_process_first_blocks_and_waiting_on_one_process() -> None:
    state = AcceleratorState()
    seen = []
    with state.main_process_first():
        seen.append("main")
    with state.local_main_process_first():
        seen.append("local")
    state.wait_for_everyone()
    assert seen == ["main", "local"]


def test_destroy_process_group_without_group_is_a_noop() -> None:
    state = PartialState()
    assert not dist.is_initialized()
    state.destroy_process_group()
    AcceleratorState().destroy_process_group()
    assert not dist.is_initialized()
    assert state.num_processes == 1


def test_print_prints_on_the_main_process(capsys: pytest.CaptureFixture[str]) -> None:
    PartialState().print("hello", 3)
    assert capsys.readouterr().out == "hello 3\n"


# --- set_seed ---------------------------------------------------------------------------------


def _draws() -> tuple[float, float, list[float]]:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_set_seed_reproduces_random_numpy_and_torch() -> None:
    set_seed(1234)
    first = _draws()
    set_seed(1234)
    assert _draws() == first
    set_seed(1235)
    other = _draws()
    assert other[0] != first[0]
    assert other[1] != first[1]
    assert other[2] != first[2]


def test_set_seed_device_specific_on_one_process_is_the_plain_seed() -> None:
    set_seed(99, device_specific=True)
    specific = _draws()
    set_seed(99)
    assert _draws() == specific
    assert PartialState().process_index == 0


def test_set_seed_deterministic() -> None:
    before = torch.are_deterministic_algorithms_enabled()
    try:
        set_seed(3, deterministic=True)
        assert torch.are_deterministic_algorithms_enabled() is True
    finally:
        torch.use_deterministic_algorithms(before)


@pytest.mark.parametrize(("bad", "error"), [(-1, ValueError), ("1", TypeError), (1.5, TypeError)])
def test_set_seed_bad_input(bad: object, error: type) -> None:
    with pytest.raises(error, match="seed"):
        set_seed(bad)  # type: ignore[arg-type]


def test_set_seed_rejects_bool() -> None:
    with pytest.raises(TypeError, match="seed"):
        set_seed(True)


def test_public_names_are_exported() -> None:
    for name in ("PartialState", "AcceleratorState", "GradientState", "set_seed"):
        assert name in nbaccel.__all__
        assert hasattr(nbaccel, name)
