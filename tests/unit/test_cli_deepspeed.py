"""``nbaccel launch --use_deepspeed`` and Accelerate's DeepSpeed flags, a DEEPSPEED config file
under them (flags win), the checks before anything starts, the variables the ranks get and the
banner; ``nbaccel config``'s DeepSpeed flags and questions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nbaccel.cli import config as config_cli
from nbaccel.cli import hostlaunch
from nbaccel.cli import launch as launch_cli
from nbaccel.cli import test as test_cli
from nbaccel.cli.main import build_parser, main
from nbaccel.config import ResolvedLaunch

FILE = """\
distributed_type: DEEPSPEED
num_processes: 2
use_cpu: true
deepspeed_config:
  zero_stage: 1
  gradient_clipping: 0.5
  offload_optimizer_device: none
"""


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME and the working directory are a temporary folder; no config file in force."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("NBACCEL_CONFIG_FILE", "HF_HOME", "XDG_CACHE_HOME", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hello')\n")
    return tmp_path


@pytest.fixture
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Any start of the script is recorded instead of run."""
    started: list[Any] = []
    monkeypatch.setattr(launch_cli, "execute", lambda *args: started.append(args) or 0)
    yield started


def _resolve(*argv: str) -> ResolvedLaunch:
    args = build_parser().parse_args(["launch", *argv, "train.py"])
    return launch_cli.resolve_from_args(args)


def _variables(resolved: ResolvedLaunch, tmp_path: Path) -> dict[str, str]:
    return launch_cli._child_environment(resolved, tmp_path / "resolved.yaml")


def test_use_deepspeed_with_accelerates_flags(tmp_path: Path) -> None:
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    resolved = _resolve(
        "--use_deepspeed",
        "--num_processes",
        "2",
        "--zero_stage",
        "3",
        "--offload_optimizer_device",
        "cpu",
        "--offload_param_device",
        "nvme",
        "--offload_param_nvme_path",
        "/scratch/params",
        "--zero3_init_flag",
        "false",
        "--zero3_save_16bit_model",
        "true",
        "--gradient_clipping",
        "0.7",
        "--gradient_accumulation_steps",
        "4",
        "--deepspeed_moe_layer_cls_names",
        "MixtralSparseMoeBlock",
    )
    cfg = resolved.config
    assert (
        cfg.distributed_type == "DEEPSPEED" and resolved.sources["deepspeed_config"] == "argument"
    )
    assert cfg.gradient_accumulation_steps == 4  # the Accelerator's, from the same flag
    variables = _variables(resolved, tmp_path)
    expected = {
        "ACCELERATE_USE_DEEPSPEED": "true",
        "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3",
        "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "cpu",
        "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE": "nvme",
        "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH": "/scratch/params",
        "ACCELERATE_DEEPSPEED_ZERO3_INIT": "false",
        "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "true",
        "ACCELERATE_GRADIENT_CLIPPING": "0.7",
        "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4",
        "ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES": "MixtralSparseMoeBlock",
    }
    assert {k: variables.get(k) for k in expected} == expected
    assert "NBACCEL_FSDP_CONFIG" not in variables
    assert launch_cli._describe(resolved).startswith(
        "nbaccel launch: 2 process(es) x 1 machine(s), DeepSpeed (ZeRO stage 3, optimizer "
        "offloaded to cpu, params offloaded to nvme, 16-bit save), cpu, mixed_precision=no"
    )
    with_file = _resolve(
        "--use_deepspeed", "--num_processes", "2", "--deepspeed_config_file", "ds.json"
    )
    assert _variables(with_file, tmp_path)["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == str(
        tmp_path / "ds.json"
    )
    assert "DeepSpeed (ZeRO stage 3, config ds.json)" in launch_cli._describe(with_file)


def test_the_flags_win_over_a_deepspeed_config_file(tmp_path: Path) -> None:
    (tmp_path / "ds.yaml").write_text(FILE)
    from_file = _resolve("--config_file", "ds.yaml")
    assert from_file.config.distributed_type == "DEEPSPEED"
    assert from_file.sources["deepspeed_config"] == "config file"
    assert _variables(from_file, tmp_path)["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "1"
    assert "DeepSpeed (ZeRO stage 1), cpu" in launch_cli._describe(from_file)
    flags = _resolve("--config_file", "ds.yaml", "--zero_stage", "2", "--gradient_clipping", "2")
    section = flags.config.deepspeed_config.values
    assert section["zero_stage"] == 2 and section["gradient_clipping"] == 2.0
    assert section["offload_optimizer_device"] == "none"  # the file's, kept
    fsdp = _resolve("--config_file", "ds.yaml", "--use_fsdp")  # the flag's kind wins
    assert fsdp.config.distributed_type == "FSDP" and not fsdp.config.deepspeed_config.values
    assert "ACCELERATE_USE_DEEPSPEED" not in _variables(fsdp, tmp_path)
    (tmp_path / "fsdp.yaml").write_text("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n")
    over_fsdp = _resolve("--config_file", "fsdp.yaml", "--use_deepspeed")
    assert over_fsdp.config.distributed_type == "DEEPSPEED"
    assert not over_fsdp.config.fsdp_config.values  # the file's FSDP settings set aside


def test_one_process_says_it_trains_without_deepspeed() -> None:
    resolved = _resolve("--use_deepspeed", "--num_processes", "1")
    assert "NO (DeepSpeed asked for, but one process on its own trains without DeepSpeed)" in (
        launch_cli._describe(resolved)
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--use_deepspeed", "--use_fsdp"],
            "--use_fsdp and --use_deepspeed both given",
        ),
        (
            ["--zero_stage", "3", "--num_processes", "2"],
            "--zero_stage: DeepSpeed settings, but distributed_type is NO; add --use_deepspeed",
        ),
        (
            ["--use_deepspeed", "--zero_stage", "5"],
            "key 'deepspeed_config.zero_stage' has the value 5; ZeRO stages are 0",
        ),
        (
            ["--use_deepspeed", "--offload_param_device", "disk"],
            "key 'deepspeed_config.offload_param_device' has the value 'disk'; allowed: none",
        ),
        (
            ["--use_deepspeed", "--fsdp_version", "2"],
            "key 'fsdp_config' has FSDP settings, but distributed_type is DEEPSPEED",
        ),
        (
            ["--use_deepspeed", "--deepspeed_config_file", "missing.json"],
            "key 'deepspeed_config.deepspeed_config_file' names missing.json, which is not a file",
        ),
        (
            ["--config_file", "bad.yaml"],
            "bad.yaml: key 'deepspeed_config.offload_optimizer_device' has the value 'gpu'",
        ),
    ],
)
def test_bad_settings_stop_the_launch_before_anything_starts(
    tmp_path: Path,
    nothing_starts: list[Any],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    expected: str,
) -> None:
    (tmp_path / "bad.yaml").write_text(FILE.replace("device: none", "device: gpu"))
    assert main(["launch", *argv, "train.py"]) == 2
    assert expected in capsys.readouterr().err
    assert nothing_starts == []


def test_nbaccel_config_writes_and_updates_the_section(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    argv = ["config", "--config_file", str(path), "--distributed_type", "DEEPSPEED"]
    assert main([*argv, "--zero_stage", "3", "--offload_param_device", "cpu"]) == 0
    written = yaml.safe_load(path.read_text())
    assert written["distributed_type"] == "DEEPSPEED"
    assert written["deepspeed_config"] == {"zero_stage": 3, "offload_param_device": "cpu"}
    update = ["config", "update", "--config_file", str(path), "--num_processes", "4"]
    assert main([*update, "--zero3_save_16bit_model", "true"]) == 0
    again = yaml.safe_load(path.read_text())
    assert again["distributed_type"] == "DEEPSPEED" and again["num_processes"] == 4
    assert again["deepspeed_config"] == {
        "zero_stage": 3,
        "offload_param_device": "cpu",
        "zero3_save_16bit_model": True,
    }
    to_fsdp = ["config", "update", "--config_file", str(path), "--distributed_type", "FSDP"]
    assert main(to_fsdp) == 0  # the new kind sets the DeepSpeed section aside
    fsdp = yaml.safe_load(path.read_text())
    assert fsdp["distributed_type"] == "FSDP" and "deepspeed_config" not in fsdp


def _answer(monkeypatch: pytest.MonkeyPatch, answers: list[tuple[str, str]]) -> list[str]:
    """Feed ``answers`` to the questions, each checked against the words of its prompt."""
    asked: list[str] = []
    queue = list(answers)

    def fake_input(prompt: str) -> str:
        asked.append(prompt)
        words, answer = queue.pop(0)
        assert words in prompt, (words, prompt)
        return answer

    monkeypatch.setattr("builtins.input", fake_input)
    return asked


def test_the_questionnaire_asks_the_deepspeed_questions(monkeypatch: pytest.MonkeyPatch) -> None:
    _answer(
        monkeypatch,
        [
            ("Kind of run (NO, MULTI_CPU, MULTI_GPU, FSDP, DEEPSPEED, XLA)", "deepspeed"),
            ("How many machines", ""),
            ("Run on the CPU only", "yes"),
            ("How many processes in total", "2"),
            ("Mixed precision", ""),
            ("Use a DeepSpeed JSON config file", ""),
            ("ZeRO stage (0, 1, 2 or 3)", "4"),  # not a stage: asked again
            ("ZeRO stage", "3"),
            ("Offload optimizer states to (none, cpu, nvme)", "cpu"),
            ("Offload parameters to", "nvme"),
            ("Folder for the parameters (nvme)", "/scratch"),
            ("Gather the 16-bit weights when saving", "yes"),
            ("debug checks", ""),
        ],
    )
    config = config_cli.questionnaire()
    assert config.distributed_type == "DEEPSPEED" and config.num_processes == 2
    assert config.deepspeed_config.values == {
        "zero_stage": 3,
        "offload_optimizer_device": "cpu",
        "offload_param_device": "nvme",
        "offload_param_nvme_path": "/scratch",
        "zero3_save_16bit_model": True,
    }


def test_the_questionnaire_takes_a_json_file_that_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    _answer(
        monkeypatch,
        [
            ("Kind of run", "DEEPSPEED"),
            ("How many machines", ""),
            ("Run on the CPU only", ""),
            ("How many processes in total", "2"),
            ("Mixed precision", ""),
            ("Use a DeepSpeed JSON config file", "yes"),
            ("Path of the DeepSpeed JSON config file", "nope.json"),  # asked again
            ("Path of the DeepSpeed JSON config file", "ds.json"),
            ("debug checks", ""),
        ],
    )
    config = config_cli.questionnaire()
    assert config.deepspeed_config.values == {"deepspeed_config_file": "ds.json"}
    assert "names nope.json, which is not a file" in capsys.readouterr().out


def test_stage_0_asks_no_offload(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _answer(
        monkeypatch,
        [
            ("Kind of run", "DEEPSPEED"),
            ("How many machines", ""),
            ("Run on the CPU only", ""),
            ("How many processes in total", ""),
            ("Mixed precision", ""),
            ("Use a DeepSpeed JSON config file", "no"),
            ("ZeRO stage", "0"),
            ("debug checks", ""),
        ],
    )
    assert config_cli.questionnaire().deepspeed_config.values == {"zero_stage": 0}
    assert not any("Offload" in prompt for prompt in asked)


def test_a_launch_on_hosts_hands_the_ranks_the_deepspeed_variables(tmp_path: Path) -> None:
    resolved = _resolve("--use_deepspeed", "--zero_stage", "1", "--hosts", "node1,node2")
    variables = hostlaunch._ranks_variables(resolved)
    assert variables is not None and variables["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "1"
    assert "DeepSpeed (ZeRO stage 1)" in hostlaunch._describe(resolved)
    assert hostlaunch._ranks_variables(_resolve("--hosts", "node1,node2")) is None


def test_nbaccel_test_runs_a_deepspeed_file_data_parallel_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ds.yaml").write_text(FILE)
    ran: list[ResolvedLaunch] = []
    monkeypatch.setattr(test_cli, "execute", lambda resolved, command: ran.append(resolved) or 0)
    assert main(["test", "--config_file", "ds.yaml"]) == 0
    (resolved,) = ran
    assert resolved.config.distributed_type == "MULTI_CPU"
    assert "ACCELERATE_USE_DEEPSPEED" not in _variables(resolved, tmp_path)
    out = capsys.readouterr().out
    assert "runs without DeepSpeed (MULTI_CPU); to check DeepSpeed, run your script" in out
