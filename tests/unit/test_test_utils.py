"""nbaccel.test_utils: the require_* decorators, the test-case classes and the assertions."""

from __future__ import annotations

import os
import sys
import unittest
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

import nbaccel.test_utils as tu
import nbaccel.utils as nu
from nbaccel import Accelerator
from nbaccel.environment import choose_device, read_launch_environment
from nbaccel.state.registry import STATE
from nbaccel.test_utils import testing


def _outcome(decorate: Callable[[Any], Any], on_class: bool = False) -> str:
    """Run one test decorated with ``decorate`` through unittest: "ran" or "skipped"."""

    def test_body(self: unittest.TestCase) -> None:
        pass

    if on_class:
        case = decorate(type("Case", (unittest.TestCase,), {"test_body": test_body}))
    else:
        case = type("Case", (unittest.TestCase,), {"test_body": decorate(test_body)})
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(case).run(result)
    assert not result.errors and not result.failures, result.errors + result.failures
    assert result.testsRun == 1
    return "skipped" if result.skipped else "ran"


DEVICE = choose_device(read_launch_environment()).kind

# Each decorator and the condition under which its test runs, as nbaccel answers it.
CONDITIONS: list[tuple[str, Callable[[], bool]]] = [
    ("require_cpu", lambda: DEVICE == "cpu"),
    ("require_non_cpu", lambda: DEVICE != "cpu"),
    ("require_cuda", lambda: nu.is_cuda_available() and not nu.is_torch_xla_available()),
    ("require_tpu", lambda: nu.is_torch_xla_available(check_is_tpu=True)),
    ("require_non_torch_xla", lambda: not nu.is_torch_xla_available()),
    ("require_multi_device", lambda: DEVICE != "cpu" and tu.device_count > 1),
    ("require_single_device", lambda: DEVICE != "cpu" and tu.device_count == 1),
    ("require_mps", nu.is_mps_available),
    ("require_fp16", nu.is_fp16_available),
    ("require_tensorboard", nu.is_tensorboard_available),
    ("require_wandb", nu.is_wandb_available),
    ("require_mlflow", nu.is_mlflow_available),
    ("require_comet_ml", nu.is_comet_ml_available),
    ("require_transformers", nu.is_transformers_available),
    ("require_datasets", nu.is_datasets_available),
    ("require_deepspeed", nu.is_deepspeed_available),
    ("require_torchvision", nu.is_torchvision_available),
    ("require_pandas", nu.is_pandas_available),
    ("require_matplotlib", nu.is_matplotlib_available),
    ("require_bnb", nu.is_bnb_available),
    (
        "require_huggingface_suite",
        lambda: nu.is_transformers_available() and nu.is_datasets_available(),
    ),
    ("require_torchdata_stateful_dataloader", nu.is_torchdata_stateful_dataloader_available),
]


@pytest.mark.parametrize(("name", "condition"), CONDITIONS, ids=[c[0] for c in CONDITIONS])
def test_a_requirement_skips_exactly_when_its_condition_fails(
    name: str, condition: Callable[[], bool]
) -> None:
    decorator = getattr(testing, name)
    expected = "ran" if condition() else "skipped"
    assert _outcome(decorator) == expected
    assert _outcome(decorator, on_class=True) == expected  # on a whole TestCase class too


def test_the_device_is_nbaccels_choice() -> None:
    assert tu.torch_device == DEVICE
    assert tu.device_count >= 1 and isinstance(tu.memory_allocated_func(), int)
    assert tu.DEFAULT_LAUNCH_COMMAND[-2:] == [
        f"--num_processes={tu.device_count}",
        "--monitor_interval=0.1",
    ]


def test_a_library_decorator_follows_what_is_importable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The condition is asked when the decorator is applied: a package that becomes
    importable turns a skip into a run."""
    if nu.is_datasets_available():
        pytest.skip("datasets is installed here; the check needs a machine without it")
    assert _outcome(testing.require_datasets) == "skipped"
    (tmp_path / "datasets.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _outcome(testing.require_datasets) == "ran"


def test_requirement_takes_a_value_and_names_what_is_missing() -> None:
    assert _outcome(tu.requirement(True, "x")) == "ran"
    case = type(
        "C", (unittest.TestCase,), {"test_a": tu.requirement(False, "a unicorn")(lambda s: None)}
    )
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(case).run(result)
    assert result.skipped[0][1] == "test requires a unicorn"


def test_require_torch_min_version_compares_with_torch() -> None:
    assert _outcome(tu.require_torch_min_version(version="1.0")) == "ran"
    assert _outcome(tu.require_torch_min_version(version="999.0")) == "skipped"
    with pytest.raises(TypeError, match="version="):
        tu.require_torch_min_version(lambda: None)


def test_slow_runs_only_with_run_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUN_SLOW", raising=False)
    assert _outcome(tu.slow) == "skipped"
    monkeypatch.setenv("RUN_SLOW", "yes")
    assert _outcome(tu.slow) == "ran"
    assert _outcome(tu.skip) == "skipped"


def _run_case(case: type[unittest.TestCase]) -> unittest.TestResult:
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(case).run(result)
    assert not result.errors and not result.failures, result.errors + result.failures
    return result


def test_accelerate_test_case_forgets_the_state_after_each_test() -> None:
    seen: list[str] = []

    class Leaves(unittest.TestCase):
        def test_bf16(self) -> None:
            seen.append(Accelerator(mixed_precision="bf16").mixed_precision)

    class Resets(tu.AccelerateTestCase):
        def test_bf16(self) -> None:
            seen.append(Accelerator(mixed_precision="bf16").mixed_precision)

    _run_case(Leaves)
    assert STATE.accelerator is not None  # a plain TestCase leaves the state behind ...
    with pytest.raises(ValueError, match="mixed_precision"):
        Accelerator(mixed_precision="no")
    tu.AccelerateTestCase().tearDown()  # ... which AccelerateTestCase's tearDown forgets
    _run_case(Resets)
    assert STATE.process is None and STATE.accelerator is None and STATE.gradient is None
    assert Accelerator(mixed_precision="no").mixed_precision == "no"
    assert seen == ["bf16", "bf16"]


def test_temp_dir_test_case_empties_its_directory_before_each_test() -> None:
    found: list[list[str]] = []

    class Writes(tu.TempDirTestCase):
        def test_1(self) -> None:
            found.append(sorted(p.name for p in self.tmpdir.iterdir()))
            (self.tmpdir / "a.txt").write_text("x")
            (self.tmpdir / "sub").mkdir()

        def test_2(self) -> None:
            found.append(sorted(p.name for p in self.tmpdir.iterdir()))

    class Keeps(Writes):
        clear_on_setup = False

    _run_case(Writes)
    assert found == [[], []] and not Writes.tmpdir.exists()
    found.clear()
    _run_case(Keeps)
    assert found == [[], ["a.txt", "sub"]] and not Keeps.tmpdir.exists()


def test_mocking_test_case_starts_and_stops_its_mocks() -> None:
    during: list[str | None] = []

    class Mocks(tu.MockingTestCase):
        def setUp(self) -> None:
            super().setUp()
            self.add_mocks(mock.patch.dict(os.environ, {"NBACCEL_PROBE_VALUE": "on"}))

        def test_sees_it(self) -> None:
            during.append(os.environ.get("NBACCEL_PROBE_VALUE"))

    _run_case(Mocks)
    assert during == ["on"] and "NBACCEL_PROBE_VALUE" not in os.environ


def test_assert_exception_checks_type_and_message() -> None:
    with tu.assert_exception(ValueError, "bad value"):
        raise ValueError("a bad value here")
    with pytest.raises(AssertionError, match="ran without issue"), tu.assert_exception(ValueError):
        pass
    with pytest.raises(AssertionError, match="KeyError"), tu.assert_exception(ValueError):
        raise KeyError("k")
    with pytest.raises(AssertionError, match="'other'"), tu.assert_exception(ValueError, "other"):
        raise ValueError("this")


def test_capture_call_output_returns_what_was_printed() -> None:
    assert tu.capture_call_output(print, "hello", 3, sep="-") == "hello-3\n"
    assert sys.stdout is sys.__stdout__ or sys.stdout is not None


def test_regression_data_follow_the_line_and_the_model_learns_it() -> None:
    import torch

    data = tu.RegressionDataset(a=2, b=3, length=256, seed=7)
    assert len(data) == 256 and set(data[0]) == {"x", "y"}
    assert data[0]["x"].dtype == torch.float32
    again = tu.RegressionDataset(a=2, b=3, length=256, seed=7)
    assert torch.equal(data.x, again.x) and torch.equal(data.y, again.y)
    residual = data.y - (2 * data.x + 3)
    assert abs(float(residual.std()) - 0.1) < 0.03
    model = tu.RegressionModel(a=1, b=-1)
    assert torch.equal(model(torch.tensor([0.0, 2.0])).detach(), torch.tensor([-1.0, 1.0]))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    for _ in range(20):
        for batch in loader:
            loss = torch.nn.functional.mse_loss(model(batch["x"]), batch["y"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    assert abs(float(model.a.detach()) - 2) < 0.05 and abs(float(model.b.detach()) - 3) < 0.05


def test_the_scripts_pass_on_one_process_and_their_checks_can_fail(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On one process (no launcher) every script passes; a check fed a wrong expectation
    (accumulation every 3 batches where the Accelerator accumulates 2) fails by name."""
    from nbaccel.testing import reset_state

    for script in (tu.test_ops, tu.test_sync, tu.test_script):
        script.main()
        reset_state()
    assert capsys.readouterr().out.count("all checks passed") == 3
    accelerator = Accelerator(gradient_accumulation_steps=2)
    with pytest.raises(AssertionError, match=r"accumulate\(3\), step 1 .*sync_gradients"):
        tu.test_sync.check_gradient_accumulation(accelerator, steps=3)
