"""Names that exist so that Accelerate code imports: custom trackers registered by name, the
trackers and big-model helpers nbaccel does not ship (a clear error when used), and the hook
helpers that do real work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import nbaccel
import nbaccel.utils
from nbaccel import Accelerator, AcceleratorState
from nbaccel.big_modeling import has_offloaded_params, remove_hook_from_module
from nbaccel.tracking import AimTracker, GeneralTracker, TrackioTracker, register_tracker_class
from nbaccel.tracking.registry import _SPECS, LOGGER_TYPE_TO_CLASS


class ListTracker(GeneralTracker):
    """A user's tracker that keeps what it is given, in a file under the logging directory."""

    name = "list_tracker_for_tests"
    requires_logging_directory = True

    def __init__(self, run_name: str, logging_dir: str, **kwargs: Any) -> None:
        super().__init__()
        self.path = Path(logging_dir) / f"{run_name}.json"
        self.kwargs = kwargs
        self.rows: list[dict[str, Any]] = []

    @property
    def tracker(self) -> Any:
        return self.rows

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.rows.append({"step": step, **values})
        self.path.write_text(json.dumps(self.rows))


@pytest.fixture
def registered() -> Any:
    register_tracker_class(ListTracker)
    yield ListTracker
    _SPECS.pop(ListTracker.name, None)
    LOGGER_TYPE_TO_CLASS.pop(ListTracker.name, None)


def test_a_registered_tracker_is_named_in_log_with(registered: Any, tmp_path: Path) -> None:
    accelerator = Accelerator(log_with=ListTracker.name, project_dir=tmp_path)
    accelerator.init_trackers("run", init_kwargs={ListTracker.name: {"tag": "x"}})
    tracker = accelerator.get_tracker(ListTracker.name, unwrap=False)
    assert isinstance(tracker, ListTracker) and tracker.kwargs == {"tag": "x"}
    accelerator.log({"loss": 0.5}, step=3)
    accelerator.end_training()
    assert json.loads((tmp_path / "run.json").read_text()) == [{"step": 3, "loss": 0.5}]


def test_registering_checks_the_class_and_warns_on_a_second_registration(registered: Any) -> None:
    with pytest.raises(ValueError, match="subclass of GeneralTracker"):
        register_tracker_class(dict)  # type: ignore[arg-type]

    class Nameless(GeneralTracker):
        requires_logging_directory = False

    with pytest.raises(ValueError, match="non-empty `name`"):
        register_tracker_class(Nameless)

    class NoFlag(GeneralTracker):  # inherits GeneralTracker's default only
        name = "no_flag_tracker"

    with pytest.raises(ValueError, match="requires_logging_directory"):
        register_tracker_class(NoFlag)
    with pytest.warns(UserWarning, match="already registered"):
        register_tracker_class(ListTracker)


@pytest.mark.parametrize("cls", [AimTracker, TrackioTracker])
def test_trackers_not_shipped_say_what_to_do(cls: Any) -> None:
    with pytest.raises(NotImplementedError, match="register_tracker_class"):
        cls("run")


def test_fp8_recipe_kwargs_points_to_mixed_precision_fp8() -> None:
    with pytest.raises(NotImplementedError, match='mixed_precision="fp8"'):
        nbaccel.utils.FP8RecipeKwargs(fp8_format="HYBRID")


class _Hook:
    """Stands for the hook Accelerate attaches: it wraps forward and may offload."""

    def __init__(self, offload: bool) -> None:
        self.offload = offload
        self.detached: list[nn.Module] = []

    def detach_hook(self, module: nn.Module) -> nn.Module:
        self.detached.append(module)
        return module


def _hooked(module: nn.Module, offload: bool) -> _Hook:
    hook = _Hook(offload)
    module._hf_hook = hook  # type: ignore[assignment]
    module._old_forward = module.forward  # type: ignore[assignment]
    module.forward = lambda *a, **k: torch.zeros(1)  # type: ignore[method-assign]
    return hook


def test_hook_helpers_read_and_undo_an_attached_hook() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    outer, inner = _hooked(model, offload=False), _hooked(model[0], offload=True)
    assert has_offloaded_params(model[0]) and not has_offloaded_params(model)
    x = torch.ones(1, 2)
    remove_hook_from_module(model)  # not recursive: the child keeps its hook
    assert outer.detached == [model] and not hasattr(model, "_hf_hook")
    assert has_offloaded_params(model[0])
    remove_hook_from_module(model, recurse=True)
    assert inner.detached == [model[0]] and not has_offloaded_params(model[0])
    first, second = model[0], model[1]
    expected = nn.functional.linear(
        nn.functional.linear(x, first.weight, first.bias), second.weight, second.bias
    )
    assert torch.equal(model(x), expected)  # the original forwards are back


def _refusals() -> list[tuple[str, Any]]:
    from nbaccel.parallelism import ParallelismConfig, TorchTensorParallelPlugin
    from nbaccel.unsupported import MegatronLMPlugin

    return [
        ("MegatronLMPlugin(...)", lambda: MegatronLMPlugin()),
        ("TorchTensorParallelPlugin(...)", lambda: TorchTensorParallelPlugin()),
        ("Accelerator(megatron_lm_plugin=...)", lambda: Accelerator(megatron_lm_plugin=object())),
        (
            "AcceleratorState(megatron_lm_plugin=...)",
            lambda: AcceleratorState(megatron_lm_plugin=1),
        ),
        (
            "ParallelismConfig(tp_size=2)",
            lambda: Accelerator(parallelism_config=ParallelismConfig(tp_size=2)),
        ),
        ("FP8RecipeKwargs(...)", lambda: nbaccel.utils.FP8RecipeKwargs()),
    ]


@pytest.mark.parametrize("index", range(6))
def test_every_refusal_has_one_wording_and_says_what_to_use_instead(index: int) -> None:
    """One mechanism for what nbaccel does not run: the call, the engine, what instead."""
    asked, call = _refusals()[index]
    try:
        with pytest.raises(NotImplementedError) as refused:
            call()
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    message = str(refused.value)
    assert message.startswith(f"{asked}: nbaccel does not run "), message
    assert message.endswith("See docs/compatibility.md."), message
    assert "FullyShardedDataParallelPlugin" in message or 'mixed_precision="fp8"' in message
