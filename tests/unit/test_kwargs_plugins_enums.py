"""Unit tests for the kwargs handlers, the configuration plugins and the enumerations."""

from __future__ import annotations

import dataclasses
import os
from datetime import timedelta

import pytest

from nbaccel import (
    DistributedType,
    DynamoBackend,
    GradientAccumulationPlugin,
    InitProcessGroupKwargs,
    KwargsHandler,
    LoggerType,
    PrecisionType,
    RNGType,
    TorchDynamoPlugin,
)

# --- InitProcessGroupKwargs -------------------------------------------------------------------


def test_default_kwargs_are_empty() -> None:
    handler = InitProcessGroupKwargs()
    assert handler.to_kwargs() == {}
    assert handler.to_dict() == {"backend": None, "init_method": None, "timeout": None}
    assert isinstance(handler, KwargsHandler)


def test_to_kwargs_returns_only_changed_fields() -> None:
    assert InitProcessGroupKwargs(backend="gloo").to_kwargs() == {"backend": "gloo"}
    assert InitProcessGroupKwargs(init_method="tcp://127.0.0.1:23456").to_kwargs() == {
        "init_method": "tcp://127.0.0.1:23456"
    }
    kwargs = InitProcessGroupKwargs(backend="nccl", timeout=timedelta(seconds=90)).to_kwargs()
    assert kwargs == {"backend": "nccl", "timeout": timedelta(seconds=90)}


@pytest.mark.parametrize(
    ("given", "seconds"), [(30, 30.0), (2.5, 2.5), (timedelta(minutes=2), 120.0)]
)
def test_timeout_number_becomes_timedelta(given: object, seconds: float) -> None:
    handler = InitProcessGroupKwargs(timeout=given)  # type: ignore[arg-type]
    assert isinstance(handler.timeout, timedelta)
    assert handler.timeout.total_seconds() == seconds
    assert handler.to_kwargs() == {"timeout": timedelta(seconds=seconds)}


@pytest.mark.parametrize("backend", ["gloo", "nccl", "mpi", "ucc", "cpu:gloo,cuda:nccl", "xla"])
def test_known_backends_are_accepted(backend: str) -> None:
    assert InitProcessGroupKwargs(backend=backend).backend == backend


@pytest.mark.parametrize("backend", ["", "tcp", "gloo,foo", "cpu:gloo,cuda:nvlink", "GLOOO"])
def test_unknown_backend_is_value_error(backend: str) -> None:
    with pytest.raises(ValueError, match="backend"):
        InitProcessGroupKwargs(backend=backend)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"backend": 1}, TypeError, "backend"),
        ({"init_method": 5}, TypeError, "init_method"),
        ({"timeout": "30"}, TypeError, "timeout"),
        ({"timeout": True}, TypeError, "timeout"),
        ({"timeout": 0}, ValueError, "timeout"),
        ({"timeout": -3.0}, ValueError, "timeout"),
        ({"timeout": timedelta(seconds=-1)}, ValueError, "timeout"),
    ],
)
def test_bad_init_process_group_kwargs(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        InitProcessGroupKwargs(**kwargs)


def test_unknown_field_is_type_error() -> None:
    with pytest.raises(TypeError):
        InitProcessGroupKwargs(world_size=2)  # type: ignore[call-arg]


# --- GradientAccumulationPlugin ---------------------------------------------------------------


def test_gradient_accumulation_plugin_defaults() -> None:
    plugin = GradientAccumulationPlugin()
    assert plugin.to_kwargs() == {
        "num_steps": 1,
        "adjust_scheduler": True,
        "sync_with_dataloader": True,
        "sync_each_batch": False,
    }


def test_gradient_accumulation_plugin_values() -> None:
    plugin = GradientAccumulationPlugin(num_steps=16, sync_each_batch=True)
    assert plugin.num_steps == 16
    assert plugin.to_kwargs()["sync_each_batch"] is True
    assert dataclasses.asdict(plugin) == plugin.to_kwargs()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"num_steps": 0}, ValueError),
        ({"num_steps": -2}, ValueError),
        ({"num_steps": 2.0}, TypeError),
        ({"num_steps": "2"}, TypeError),
        ({"num_steps": True}, TypeError),
        ({"adjust_scheduler": 1}, TypeError),
        ({"sync_with_dataloader": "no"}, TypeError),
        ({"sync_each_batch": None}, TypeError),
    ],
)
def test_gradient_accumulation_plugin_validation(kwargs: dict, error: type) -> None:
    name = next(iter(kwargs))
    with pytest.raises(error, match=name):
        GradientAccumulationPlugin(**kwargs)


# --- TorchDynamoPlugin ------------------------------------------------------------------------


def test_torch_dynamo_plugin_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("ACCELERATE_DYNAMO_")]:
        monkeypatch.delenv(name)
    plugin = TorchDynamoPlugin()
    assert plugin.backend is DynamoBackend.NO and plugin.mode == "default"
    assert plugin.fullgraph is False and plugin.dynamic is None
    assert plugin.to_kwargs() == {}  # unset values are left out, as in Accelerate
    assert TorchDynamoPlugin(backend="inductor").to_kwargs() == {"backend": "inductor"}
    given = TorchDynamoPlugin(backend="eager", mode="max-autotune", dynamic=False, disable=True)
    expected = {"backend": "eager", "mode": "max-autotune", "dynamic": False, "disable": True}
    assert given.to_kwargs() == expected


def test_torch_dynamo_plugin_reads_the_launch_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelerate.utils import TorchDynamoPlugin as AccelerateDynamoPlugin

    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "INDUCTOR")
    monkeypatch.setenv("ACCELERATE_DYNAMO_MODE", "reduce-overhead")
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_FULLGRAPH", "True")
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_DYNAMIC", "false")
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", "1")
    plugin = TorchDynamoPlugin()
    assert plugin.backend is DynamoBackend.INDUCTOR and plugin.mode == "reduce-overhead"
    assert plugin.fullgraph is True and plugin.dynamic is False
    assert plugin.use_regional_compilation is True
    assert plugin.to_kwargs() == AccelerateDynamoPlugin().to_kwargs()
    from nbaccel import Accelerator

    launched = Accelerator().state.dynamo_plugin  # what a launched script's Accelerator uses
    assert launched is not None and launched.to_kwargs() == plugin.to_kwargs()
    assert TorchDynamoPlugin(backend="eager", fullgraph=False).to_kwargs()["backend"] == "eager"
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_FULLGRAPH", "maybe")
    with pytest.raises(ValueError, match="ACCELERATE_DYNAMO_USE_FULLGRAPH"):
        TorchDynamoPlugin()


@pytest.mark.parametrize(
    ("given", "member"),
    [
        ("inductor", DynamoBackend.INDUCTOR),
        ("INDUCTOR", DynamoBackend.INDUCTOR),
        ("aot_eager", DynamoBackend.AOT_EAGER),
        (DynamoBackend.EAGER, DynamoBackend.EAGER),
    ],
)
def test_torch_dynamo_plugin_backend_is_parsed(given: object, member: DynamoBackend) -> None:
    plugin = TorchDynamoPlugin(backend=given, mode="max-autotune", fullgraph=True, dynamic=False)  # type: ignore[arg-type]
    assert plugin.backend is member
    assert plugin.to_kwargs() == {
        "backend": member.value.lower(),
        "mode": "max-autotune",
        "fullgraph": True,
        "dynamic": False,
    }


def test_torch_dynamo_plugin_validation() -> None:
    with pytest.raises(ValueError, match="backend"):
        TorchDynamoPlugin(backend="turbo")
    with pytest.raises(ValueError, match="mode"):
        TorchDynamoPlugin(mode="fast")


# --- enums ------------------------------------------------------------------------------------


def test_precision_type_values_and_parse() -> None:
    assert [str(m) for m in PrecisionType] == ["no", "fp8", "fp16", "bf16"]
    assert PrecisionType.BF16 == "bf16"
    assert PrecisionType.parse("FP16", "mixed_precision") is PrecisionType.FP16
    assert PrecisionType.parse(PrecisionType.NO, "mixed_precision") is PrecisionType.NO
    with pytest.raises(ValueError, match=r"mixed_precision='fp32'.*'bf16'"):
        PrecisionType.parse("fp32", "mixed_precision")
    with pytest.raises(ValueError, match="mixed_precision"):
        PrecisionType.parse(None, "mixed_precision")


def test_distributed_type_parse_accepts_tpu_alias() -> None:
    assert DistributedType.parse("tpu", "distributed_type") is DistributedType.XLA
    assert DistributedType.parse("multi_cpu", "distributed_type") is DistributedType.MULTI_CPU
    with pytest.raises(ValueError, match="distributed_type"):
        DistributedType.parse("MULTI_TPU_POD", "distributed_type")


def test_other_enums() -> None:
    assert RNGType.TORCH == "torch" and RNGType.GENERATOR == "generator"
    assert {"torch", "cuda", "xla", "generator"} <= {m.value for m in RNGType}
    assert LoggerType.TENSORBOARD == "tensorboard" and LoggerType.ALL == "all"
    assert str(LoggerType.WANDB) == "wandb"
    assert DynamoBackend.INDUCTOR == "INDUCTOR"
    assert isinstance(DistributedType.NO, str)
