"""nbaccel.test_utils: launch commands, running programs, and the files tests refer to."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import nbaccel
import nbaccel.test_utils as tu

# Every name Accelerate 1.15's own test files import from accelerate.test_utils.
IMPORTED = {
    "nbaccel.test_utils": [
        "DEFAULT_LAUNCH_COMMAND", "assert_exception", "device_count", "execute_subprocess_async",
        "get_launch_command", "memory_allocated_func", "path_in_accelerate_package",
        "require_bnb", "require_cpu", "require_cuda_or_xpu", "require_fp8", "require_fp16",
        "require_huggingface_suite", "require_multi_device", "require_non_cpu",
        "require_non_hpu", "require_non_torch_xla", "require_pippy", "require_single_device",
        "require_torchvision", "require_tpu", "require_transformer_engine", "run_first", "slow",
        "test_ops", "test_script", "test_sync", "torch_device", "RegressionDataset",
        "RegressionModel",
    ],
    "nbaccel.test_utils.testing": [
        "AccelerateTestCase", "MockingTestCase", "TempDirTestCase", "assert_exception",
        "require_aim", "require_clearml", "require_comet_ml", "require_cuda", "require_datasets",
        "require_deepspeed", "require_dvclive", "require_huggingface_suite",
        "require_import_timer", "require_matplotlib", "require_mlflow", "require_non_cpu",
        "require_non_torch_xla", "require_pandas", "require_swanlab", "require_tensorboard",
        "require_torch_min_version", "require_torchdata_stateful_dataloader", "require_tpu",
        "require_trackio", "require_transformers", "require_triton", "require_wandb",
        "run_command", "skip", "slow", "torch_device",
    ],
    "nbaccel.test_utils.training": ["RegressionDataset", "RegressionModel", "mocked_dataloaders"],
    "nbaccel.test_utils.examples": ["compare_against_test"],
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(IMPORTED))
def test_every_name_accelerates_tests_import_exists(module: str) -> None:
    imported = __import__(module, fromlist=["_"])
    missing = [name for name in IMPORTED[module] if not hasattr(imported, name)]
    assert not missing


def test_launch_command_runs_nbaccel_with_this_interpreter() -> None:
    command = tu.get_launch_command(num_processes=2, cpu=True, debug=False, config_file=None)
    assert command == [sys.executable, "-m", "nbaccel", "launch", "--num_processes=2", "--cpu"]


def test_paths_point_into_the_nbaccel_package() -> None:
    script = tu.path_in_accelerate_package("test_utils", "scripts", "test_script.py")
    assert script.is_file() and script.parent.parent.parent == Path(nbaccel.__file__).parent
    assert script == tu.path_in_nbaccel_package("test_utils", "scripts", "test_script.py")


def test_execute_subprocess_async_returns_the_lines_and_the_code() -> None:
    code = "import sys; print('out 1'); print('err 1', file=sys.stderr); print('out 2')"
    result = tu.execute_subprocess_async([sys.executable, "-c", code], quiet=True)
    assert (result.returncode, result.stdout, result.stderr) == (0, ["out 1", "out 2"], ["err 1"])


def test_execute_subprocess_async_raises_with_the_stderr_of_a_failure() -> None:
    code = "import sys; print('it broke', file=sys.stderr); sys.exit(3)"
    with pytest.raises(RuntimeError, match=r"returncode 3[\s\S]*it broke"):
        tu.execute_subprocess_async([sys.executable, "-c", code], quiet=True, echo=False)


def test_execute_subprocess_async_kills_a_command_past_its_timeout() -> None:
    code = "import time; print('started', flush=True); time.sleep(60)"
    with pytest.raises(RuntimeError, match=r"did not finish within 1 s[\s\S]*started"):
        tu.execute_subprocess_async([sys.executable, "-c", code], timeout=1, quiet=True)


def test_run_command_returns_the_output_or_raises_with_it(tmp_path: Path) -> None:
    assert tu.run_command([sys.executable, "-c", "print('hi')"], return_stdout=True) == "hi\n"
    assert tu.run_command([sys.executable, "-c", "pass"]) is None
    with pytest.raises(tu.SubprocessCallException, match="boom"):
        tu.run_command([sys.executable, "-c", "raise SystemExit('boom')"])


def test_xdist_worker_id_and_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert (tu.pytest_xdist_worker_id(), tu.get_torch_dist_unique_port()) == (0, 29500)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    assert (tu.pytest_xdist_worker_id(), tu.get_torch_dist_unique_port()) == (3, 29503)


TEMPLATE = """import os

def training_function(config):
    model = build()
    train_dataloader, eval_dataloader = get_dataloaders(accelerator, batch_size)
    for batch in train_dataloader:
        step(batch)

def main():
    parser = make_parser()

if __name__ == "__main__":
    main()
"""


def test_compare_against_test_lists_the_feature_lines_the_complete_script_lacks(
    tmp_path: Path,
) -> None:
    from nbaccel.test_utils.examples import compare_against_test

    def script(name: str, extra_training: str, extra_main: str = "") -> Path:
        text = TEMPLATE.replace("        step(batch)\n", "        step(batch)\n" + extra_training)
        text = text.replace(
            "    parser = make_parser()\n", "    parser = make_parser()\n" + extra_main
        )
        path = tmp_path / name
        path.write_text(text)
        return path

    template = script("nlp_example.py", "")
    mocked = '    if os.environ.get("TESTING_MOCKED_DATALOADERS", None) == "1":\n        n = 2\n'
    feature = script(
        "tracking.py", "        # log it\n        log(batch)\n" + mocked, "    track()\n"
    )
    complete = script("complete.py", "        log(batch)\n", "    other()\n")
    partial = script("partial.py", "", "    track()\n")
    compare = dict(template_filename=template)
    assert compare_against_test(complete, feature, False, **compare) == []
    assert compare_against_test(partial, feature, False, **compare) == ["        log(batch)\n"]
    assert compare_against_test(complete, feature, True, **compare) == ["    track()\n"]
    assert compare_against_test(partial, feature, True, **compare) == []
