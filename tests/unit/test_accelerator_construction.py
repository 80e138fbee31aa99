"""Accelerator(...) in one process: its documented arguments, attributes and bad input."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

import nbaccel.training.preparation
from nbaccel import (
    Accelerator,
    AcceleratorState,
    AutocastKwargs,
    DataLoaderConfiguration,
    DistributedDataParallelKwargs,
    DistributedType,
    GradientAccumulationPlugin,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    PrecisionType,
    ProjectConfiguration,
    RNGType,
)
from nbaccel.kwargs_handlers import KwargsHandler
from nbaccel.testing import reset_state


def test_defaults_describe_one_cpu_process() -> None:
    acc = Accelerator()
    assert acc.device == torch.device("cpu")
    assert acc.distributed_type == DistributedType.NO
    assert (acc.num_processes, acc.process_index, acc.local_process_index) == (1, 0, 0)
    assert acc.is_main_process and acc.is_local_main_process
    assert acc.mixed_precision == "no"
    assert isinstance(acc.state, AcceleratorState)
    assert acc.state.num_processes == 1 and acc.state.device == acc.device
    assert acc.sync_gradients is True
    assert acc.optimizer_step_was_skipped is False
    assert acc.use_distributed is False
    assert acc.gradient_accumulation_steps == 1
    assert acc.split_batches is False and acc.even_batches is True
    assert acc.step_scheduler_with_optimizer is True


def test_cpu_true_runs_on_the_cpu() -> None:
    acc = Accelerator(cpu=True)
    assert acc.device.type == "cpu"
    assert acc.state.device.type == "cpu"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("no", "no"),
        ("fp16", "fp16"),
        ("bf16", "bf16"),
        ("BF16", "bf16"),
        (PrecisionType.FP16, "fp16"),
    ],
)
def test_mixed_precision_values(given: object, expected: str) -> None:
    acc = Accelerator(mixed_precision=given)  # type: ignore[arg-type]
    assert acc.mixed_precision == expected
    assert acc.state.mixed_precision == expected
    assert acc.scaler is None  # fp16 reads "fp16" but trains in fp32 on the CPU, as Accelerate


def test_fp8_on_cpu_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"fp8.*(GPU|compute capability).*bf16"):
        Accelerator(mixed_precision="fp8")


def test_a_refused_fp8_accelerator_does_not_poison_the_next_one() -> None:
    with pytest.raises(ValueError):
        Accelerator(mixed_precision="fp8")
    assert Accelerator(mixed_precision="bf16").mixed_precision == "bf16"


@pytest.mark.parametrize("bad", ["fp32", "int8", "float16", ""])
def test_unknown_mixed_precision_names_the_allowed_values(bad: str) -> None:
    with pytest.raises(ValueError, match=r"mixed_precision.*'no'.*'fp16'.*'bf16'"):
        Accelerator(mixed_precision=bad)


def test_fp16_true_is_mixed_precision_fp16_with_a_deprecation_warning() -> None:
    with pytest.warns(FutureWarning, match="mixed_precision='fp16'"):
        acc = Accelerator(fp16=True)
    assert acc.mixed_precision == "fp16"
    assert acc.scaler is None  # on the CPU: full precision (the scaler is tests/gpu's)


@pytest.mark.parametrize("steps", [1, 2, 5])
def test_gradient_accumulation_steps(steps: int) -> None:
    acc = Accelerator(gradient_accumulation_steps=steps)
    assert acc.gradient_accumulation_steps == steps
    assert acc.gradient_state.num_steps == steps


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_gradient_accumulation_steps_below_one_or_not_int_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        Accelerator(gradient_accumulation_steps=bad)  # type: ignore[arg-type]


def test_gradient_accumulation_plugin() -> None:
    plugin = GradientAccumulationPlugin(num_steps=3, adjust_scheduler=False, sync_each_batch=True)
    acc = Accelerator(gradient_accumulation_plugin=plugin)
    assert acc.gradient_accumulation_steps == 3
    assert acc.gradient_state.sync_each_batch is True
    assert acc.gradient_state.adjust_scheduler is False


def test_gradient_accumulation_plugin_and_steps_together_is_refused() -> None:
    with pytest.raises(ValueError, match="not both"):
        Accelerator(
            gradient_accumulation_steps=2,
            gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=2),
        )


def test_dataloader_config() -> None:
    config = DataLoaderConfiguration(split_batches=True, even_batches=False, dispatch_batches=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        acc = Accelerator(dataloader_config=config)
    assert acc.split_batches is True
    assert acc.even_batches is False
    assert acc.dispatch_batches is False


@pytest.mark.parametrize(
    "kwargs",
    [{"dispatch_batches": True}, {"even_batches": False}, {"split_batches": True}],
    ids=lambda k: next(iter(k)),
)
def test_data_loader_options_passed_directly_work_with_a_future_warning(
    kwargs: dict[str, bool],
) -> None:
    name, value = next(iter(kwargs.items()))
    with pytest.warns(FutureWarning, match="dataloader_config"):
        acc = Accelerator(**kwargs)  # type: ignore[arg-type]
    assert getattr(acc.dataloader_config, name) is value
    assert getattr(acc, name) is value


@pytest.mark.parametrize(
    "kwargs",
    [{"even_batches": "no"}, {"dispatch_batches": 3}, {"split_batches": 1}],
    ids=lambda k: next(iter(k)),
)
def test_data_loader_options_passed_directly_are_validated(kwargs: dict[str, object]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        with pytest.raises(TypeError, match="True or False"):
            Accelerator(**kwargs)  # type: ignore[arg-type]


def test_rng_types() -> None:
    acc = Accelerator(rng_types=["torch", RNGType.GENERATOR])
    assert acc.rng_types == ["torch", "generator"]
    reset_state()
    with pytest.raises(ValueError, match=r"rng_types.*'generator'"):
        Accelerator(rng_types=["bogus"])


def test_project_dir_and_project_config(tmp_path: Path) -> None:
    acc = Accelerator(project_dir=str(tmp_path))
    assert Path(acc.project_dir) == tmp_path
    reset_state()
    config = ProjectConfiguration(project_dir=str(tmp_path), logging_dir=str(tmp_path / "logs"))
    acc = Accelerator(project_config=config)
    assert acc.project_configuration is config
    assert Path(acc.project_dir) == tmp_path
    assert Path(acc.logging_dir) == tmp_path / "logs"


def test_device_placement_false_leaves_models_and_batches_where_they_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    moved: list[nn.Module] = []
    original = nbaccel.training.preparation.move_model_to_device

    def spy(model: nn.Module, device: torch.device) -> None:
        moved.append(model)
        original(model, device)

    monkeypatch.setattr(nbaccel.training.preparation, "move_model_to_device", spy)
    acc = Accelerator(device_placement=False)
    model, loader = acc.prepare(nn.Linear(2, 2), DataLoader(range(4), batch_size=2))
    assert moved == []
    assert loader.device is None
    reset_state()
    acc = Accelerator()
    model, loader = acc.prepare(nn.Linear(2, 2), DataLoader(range(4), batch_size=2))
    assert moved == [model]
    assert loader.device == torch.device("cpu")


def test_prepare_device_placement_list_per_object(monkeypatch: pytest.MonkeyPatch) -> None:
    moved: list[nn.Module] = []
    monkeypatch.setattr(
        nbaccel.training.preparation, "move_model_to_device", lambda m, d: moved.append(m)
    )
    acc = Accelerator()
    kept, placed = nn.Linear(1, 1), nn.Linear(1, 1)
    acc.prepare(kept, placed, device_placement=[False, True])
    assert moved == [placed]


def test_device_placement_list_of_the_wrong_length_is_refused() -> None:
    acc = Accelerator()
    with pytest.raises(ValueError, match=r"device_placement.*2 entries for 1"):
        acc.prepare(nn.Linear(2, 2), device_placement=[True, False])


def test_step_scheduler_with_optimizer_attribute() -> None:
    acc = Accelerator(step_scheduler_with_optimizer=False)
    assert acc.step_scheduler_with_optimizer is False


def test_kwargs_handlers_are_used() -> None:
    acc = Accelerator(
        mixed_precision="bf16",
        kwargs_handlers=[
            GradScalerKwargs(init_scale=1024.0, growth_interval=7),  # for fp16 where it trains
            DistributedDataParallelKwargs(find_unused_parameters=True),
            InitProcessGroupKwargs(),
            AutocastKwargs(enabled=False),
        ],
    )
    assert acc.scaler is None
    assert acc._preparer.ddp_kwargs["find_unused_parameters"] is True
    with acc.autocast():  # AutocastKwargs(enabled=False): no half precision
        assert nn.Linear(2, 2)(torch.ones(1, 2)).dtype == torch.float32


def test_duplicate_kwargs_handlers_are_refused() -> None:
    with pytest.raises(ValueError, match="two GradScalerKwargs"):
        Accelerator(kwargs_handlers=[GradScalerKwargs(), GradScalerKwargs(init_scale=2.0)])


def test_unknown_kwargs_handler_types_are_refused() -> None:
    class MyKwargs(KwargsHandler):
        pass

    with pytest.raises(TypeError, match=r"MyKwargs.*allowed.*GradScalerKwargs"):
        Accelerator(kwargs_handlers=[MyKwargs()])
    reset_state()
    with pytest.raises(TypeError, match="dict"):
        Accelerator(kwargs_handlers=[{"find_unused_parameters": True}])  # type: ignore[list-item]


def test_megatron_is_not_implemented() -> None:
    with pytest.raises(NotImplementedError, match="megatron_lm_plugin"):
        Accelerator(megatron_lm_plugin=object())


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "EAGER"])
def test_dynamo_backend_is_recorded(backend: str) -> None:
    acc = Accelerator(dynamo_backend=backend)
    assert str(acc.state.dynamo_plugin.backend).lower() == backend.lower()


def test_unknown_dynamo_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="nonsense"):
        Accelerator(dynamo_backend="nonsense")


def test_repr_names_the_setup() -> None:
    text = repr(Accelerator(mixed_precision="bf16"))
    assert "bf16" in text and "NO" in text
