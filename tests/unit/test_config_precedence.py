"""One precedence everywhere: explicit argument > config file > default."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbaccel import Accelerator
from nbaccel.config import ConfigError, config_in_force, launcher_defaults, resolve_launch
from nbaccel.launch.config import LaunchConfig


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("NBACCEL_CONFIG_FILE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)


def _use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(path))
    return path


FILE = "num_processes: 4\nnum_machines: 2\nmain_process_ip: 10.1.2.3\nmain_process_port: 29999\n"


def test_launch_explicit_beats_file_beats_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(tmp_path, monkeypatch, FILE + "mixed_precision: bf16\n")
    loaded = config_in_force()
    resolved = resolve_launch({"mixed_precision": "fp16", "num_processes": None}, loaded)
    assert resolved.config.mixed_precision == "fp16"
    assert resolved.sources["mixed_precision"] == "argument"
    assert resolved.processes_per_machine == 2  # the file's total 4 over 2 machines
    assert resolved.sources["num_processes"] == "config file"
    assert resolved.config.main_process_port == 29999
    assert resolved.sources["rdzv_backend"] == "default"
    explicit = resolve_launch({"num_processes": 3}, loaded)
    assert explicit.processes_per_machine == 3 and explicit.config.num_processes == 6


def test_launch_defaults_without_a_file() -> None:
    resolved = resolve_launch({}, None)
    assert resolved.config.mixed_precision == "no"
    assert resolved.processes_per_machine == 1
    assert resolved.config.distributed_type == "NO"
    assert resolved.sources["mixed_precision"] == "default"


def test_several_machines_need_an_address() -> None:
    with pytest.raises(ConfigError, match="main_process_ip"):
        resolve_launch({"num_machines": 2}, None)


def test_notebook_launcher_none_arguments_come_from_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = {"num_processes": None, "mixed_precision": None, "use_port": None, "num_nodes": 1}
    assert launcher_defaults(args) == args  # no file: unchanged
    _use(
        tmp_path, monkeypatch, "num_processes: 2\nmixed_precision: bf16\nmain_process_port: 29123\n"
    )
    filled = launcher_defaults(args)
    assert filled == {
        "num_processes": 2,
        "mixed_precision": "bf16",
        "use_port": 29123,
        "num_nodes": 1,
    }
    kept = launcher_defaults({**args, "mixed_precision": "fp16", "num_processes": 1})
    assert kept["mixed_precision"] == "fp16" and kept["num_processes"] == 1


def test_launch_config_takes_the_files_port_as_explicit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert LaunchConfig.build(cpu=True).use_port is None
    _use(
        tmp_path, monkeypatch, "num_processes: 2\nmixed_precision: bf16\nmain_process_port: 29123\n"
    )
    config = LaunchConfig.build(cpu=True)
    assert (config.num_processes, config.mixed_precision, config.use_port) == (2, "bf16", 29123)
    assert LaunchConfig.build(cpu=True, num_processes=1, mixed_precision="no").num_processes == 1


def test_accelerator_precision_argument_then_launcher_then_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert Accelerator(cpu=True).mixed_precision == "no"
    from nbaccel.testing import reset_state

    reset_state()
    _use(tmp_path, monkeypatch, "mixed_precision: bf16\n")
    assert Accelerator(cpu=True).mixed_precision == "bf16"
    reset_state()
    assert Accelerator(cpu=True, mixed_precision="no").mixed_precision == "no"
    reset_state()
    monkeypatch.setenv("NBACCEL_MIXED_PRECISION", "fp16")  # the launcher's choice
    assert Accelerator(cpu=True).mixed_precision == "fp16"


def test_accelerator_compiles_with_the_files_dynamo_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch import nn

    from nbaccel.testing import reset_state

    _use(tmp_path, monkeypatch, "dynamo_config:\n  dynamo_backend: EAGER\n  dynamo_mode: default\n")
    accelerator = Accelerator(cpu=True)
    assert str(accelerator.state.dynamo_plugin.backend) == "EAGER"
    model = accelerator.prepare(nn.Linear(2, 2))
    assert hasattr(model, "_orig_mod")  # compiled by torch.compile
    reset_state()
    explicit = Accelerator(cpu=True, dynamo_backend="no")  # the argument wins over the file
    assert not hasattr(explicit.prepare(nn.Linear(2, 2)), "_orig_mod")
