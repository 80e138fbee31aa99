"""The config file's ``deepspeed_config``: Accelerate's DEEPSPEED files load, bad values and
contradictions name the key, the DeepSpeed JSON file is checked before a launch, and the
settings reach ``DeepSpeedPlugin`` through the launch variables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbaccel.config import (
    ConfigError,
    ConfigFile,
    DeepSpeedConfig,
    launcher_defaults,
    load_config_file,
    resolve_launch,
    save_config_file,
)
from nbaccel.config.values import ValueProblem
from nbaccel.deepspeed import DeepSpeedPlugin
from nbaccel.environment import deepspeed_launch_variables, deepspeed_launched

# What `accelerate config` writes for DeepSpeed without a JSON file (keys in its order).
ACCELERATE_FILE = """\
compute_environment: LOCAL_MACHINE
debug: false
deepspeed_config:
  gradient_accumulation_steps: 4
  gradient_clipping: 1.0
  offload_optimizer_device: CPU
  offload_param_device: none
  zero3_init_flag: true
  zero3_save_16bit_model: true
  zero_stage: 3
distributed_type: DEEPSPEED
downcast_bf16: 'no'
enable_cpu_affinity: false
machine_rank: 0
main_training_function: main
mixed_precision: bf16
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
"""


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME is a temporary folder (no config file of the machine), and the working directory."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("NBACCEL_CONFIG_FILE", "HF_HOME", "XDG_CACHE_HOME", "ACCELERATE_USE_DEEPSPEED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(home)
    return home


def _file(tmp_path: Path, text: str, name: str = "ds.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _json(tmp_path: Path, config: dict[str, object], name: str = "ds_config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return path


def test_accelerates_deepspeed_file_loads_with_its_values_normalised(tmp_path: Path) -> None:
    loaded = load_config_file(_file(tmp_path, ACCELERATE_FILE), report=None)
    cfg = loaded.config
    assert cfg.distributed_type == "DEEPSPEED"
    section = cfg.deepspeed_config
    assert section.stage == 3
    assert section.values["offload_optimizer_device"] == "cpu"  # "CPU" as DeepSpeed spells it
    assert section.values["zero3_init_flag"] is True
    assert section.values["gradient_accumulation_steps"] == 4
    assert loaded.ignored == ()  # enable_cpu_affinity: false is quiet


def test_the_multinode_launcher_keys_are_accepted_and_reported(tmp_path: Path) -> None:
    text = ACCELERATE_FILE.replace(
        "  zero_stage: 3\n",
        "  zero_stage: 3\n  deepspeed_multinode_launcher: standard\n  deepspeed_hostfile: ''\n",
    )
    messages: list[str] = []
    loaded = load_config_file(_file(tmp_path, text), report=messages.append)
    assert loaded.ignored == ("deepspeed_config.deepspeed_multinode_launcher",)
    assert "deepspeed_config.deepspeed_multinode_launcher" in messages[0]
    assert "deepspeed_multinode_launcher" not in loaded.config.deepspeed_config.values


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "zero_stage: 3",
            "zero_stage: 4",
            r"ds\.yaml: key 'deepspeed_config\.zero_stage' has the value 4; ZeRO stages are 0",
        ),
        (
            "offload_optimizer_device: CPU",
            "offload_optimizer_device: gpu",
            r"key 'deepspeed_config\.offload_optimizer_device' has the value 'gpu'; allowed: "
            r"none, cpu, nvme",
        ),
        (
            "gradient_clipping: 1.0",
            "gradient_clipping: -1",
            r"key 'deepspeed_config\.gradient_clipping' has the value -1; use a number above 0",
        ),
        (
            "zero3_init_flag: true",
            "zero3_init_flg: true",
            r"'deepspeed_config\.zero3_init_flg' .* "
            r"Did you mean 'deepspeed_config\.zero3_init_flag'",
        ),
        (
            "zero_stage: 3",
            "zero_stage: 2",  # the file offloads nothing of the parameters, so 2 would be fine
            None,
        ),
        (
            "offload_param_device: none\n",
            "offload_param_device: cpu\n",
            None,  # stage 3: parameters may be offloaded
        ),
        (
            "zero_stage: 3",
            "zero_stage: 0",
            r"key 'deepspeed_config\.offload_optimizer_device' is wrong: "
            r"offload_optimizer_device='cpu' needs a ZeRO stage of 1 or more, but the ZeRO stage "
            r"is 0; raise the stage",
        ),
        (
            "offload_optimizer_device: CPU",
            "offload_optimizer_device: nvme",
            r"key 'deepspeed_config\.offload_optimizer_nvme_path' is wrong: "
            r"offload_optimizer_device='nvme' needs offload_optimizer_nvme_path, a folder",
        ),
        (
            "deepspeed_config:\n",
            "fsdp_config:\n  fsdp_version: 2\ndeepspeed_config:\n",
            r"key 'fsdp_config' has FSDP settings, but distributed_type is DEEPSPEED .*remove "
            r"fsdp_config",
        ),
        (
            "distributed_type: DEEPSPEED",
            "distributed_type: FSDP",
            r"key 'deepspeed_config' has DeepSpeed settings, but distributed_type is FSDP",
        ),
    ],
)
def test_bad_values_and_contradictions_name_the_key(
    tmp_path: Path, old: str, new: str, expected: str | None
) -> None:
    assert old in ACCELERATE_FILE
    path = _file(tmp_path, ACCELERATE_FILE.replace(old, new))
    if expected is None:
        load_config_file(path, report=None)
        return
    with pytest.raises(ConfigError, match=expected):
        load_config_file(path, report=None)


def test_offloading_parameters_below_stage_3_is_refused() -> None:
    with pytest.raises(ValueProblem, match=r"needs ZeRO stage 3, but the ZeRO stage is 2") as info:
        DeepSpeedConfig({"zero_stage": 2, "offload_param_device": "cpu"})
    assert info.value.key == "offload_param_device"
    assert DeepSpeedConfig({"offload_param_device": "cpu", "deepspeed_config_file": "x.json"})


def test_a_section_outside_deepspeed_is_kept_and_reported_as_not_acted_on(
    tmp_path: Path,
) -> None:
    text = "distributed_type: MULTI_GPU\ndeepspeed_config:\n  zero_stage: 1\n"
    loaded = load_config_file(_file(tmp_path, text), report=None)
    assert loaded.ignored == ("deepspeed_config",)
    assert loaded.config.deepspeed_config.values == {"zero_stage": 1}
    empty = load_config_file(_file(tmp_path, "deepspeed_config: {}\n", "e.yaml"), report=None)
    assert empty.ignored == ()


def test_the_section_round_trips_through_a_written_file(tmp_path: Path) -> None:
    cfg = load_config_file(_file(tmp_path, ACCELERATE_FILE), report=None).config
    again = load_config_file(save_config_file(cfg, tmp_path / "out.yaml"), report=None).config
    assert again == cfg
    plain = save_config_file(ConfigFile(), tmp_path / "plain.yaml").read_text()
    assert "deepspeed_config" not in plain  # an empty section is left out


def test_the_settings_reach_the_plugin_through_the_launch_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _json(tmp_path, {"zero_optimization": {"stage": 3}, "train_batch_size": "auto"})
    section = DeepSpeedConfig(
        {
            "zero_stage": 3,
            "offload_optimizer_device": "cpu",
            "gradient_clipping": 0.5,
            "gradient_accumulation_steps": 2,
            "zero3_save_16bit_model": True,
            "deepspeed_moe_layer_cls_names": ["MixtralSparseMoeBlock", "Block"],
        }
    )
    variables = deepspeed_launch_variables(section.launch_settings())
    assert variables["ACCELERATE_USE_DEEPSPEED"] == "true"
    assert variables["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "3"
    assert variables["ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES"] == "MixtralSparseMoeBlock,Block"
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert deepspeed_launched()
    plugin = DeepSpeedPlugin()
    assert plugin.zero_stage == 3 and plugin.offload_optimizer_device == "cpu"
    assert plugin.gradient_clipping == 0.5 and plugin.gradient_accumulation_steps == 2
    assert plugin.zero3_save_16bit_model is True
    assert plugin.transformer_moe_cls_names == "MixtralSparseMoeBlock,Block"
    with_file = DeepSpeedConfig({"deepspeed_config_file": str(config.name)})
    monkeypatch.chdir(tmp_path)
    settings = with_file.launch_settings()
    assert settings == {"hf_ds_config": str(config.resolve())}  # absolute: ranks may chdir


def test_the_json_file_is_checked_before_a_launch(tmp_path: Path) -> None:
    missing = DeepSpeedConfig({"deepspeed_config_file": "nowhere.json"})
    with pytest.raises(ValueProblem, match=r"names nowhere\.json, which is not a file") as info:
        missing.check_config_file()
    assert info.value.key == "deepspeed_config_file"
    broken = tmp_path / "broken.json"
    broken.write_text("{oops")
    with pytest.raises(ValueProblem, match=r"cannot be read as JSON"):
        DeepSpeedConfig({"deepspeed_config_file": str(broken)}).check_config_file()
    bare = _json(tmp_path, {"train_batch_size": 8}, "bare.json")
    with pytest.raises(ValueProblem, match=r"has no 'zero_optimization' section; add one"):
        DeepSpeedConfig({"deepspeed_config_file": str(bare)}).check_config_file()
    good = _json(tmp_path, {"zero_optimization": {"stage": 1}, "gradient_clipping": "auto"})
    agreeing = DeepSpeedConfig({"deepspeed_config_file": str(good), "gradient_clipping": 2.0})
    agreeing.check_config_file()  # "auto" in the JSON: the key fills it
    assert agreeing.describe() == f"ZeRO stage 1, config {good}"
    clash = DeepSpeedConfig({"deepspeed_config_file": str(good), "zero_stage": 3})
    with pytest.raises(ValueProblem, match=r"is 3, but .* says zero_optimization\.stage: 1"):
        clash.check_config_file()


def test_a_launch_and_notebook_launcher_refuse_a_missing_json_file_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: gone.json\n"
    path = _file(tmp_path, text)
    loaded = load_config_file(path, report=None)  # reading the file does not need the JSON
    expected = r"key 'deepspeed_config\.deepspeed_config_file' names gone\.json, which is not"
    with pytest.raises(ConfigError, match=expected):
        resolve_launch({}, loaded)
    monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(path))
    with pytest.raises(ConfigError, match=rf"{path.name}: {expected}"):
        launcher_defaults({"num_processes": None})


def test_notebook_launchers_precedence_hands_on_the_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(_file(tmp_path, ACCELERATE_FILE)))
    filled = launcher_defaults({"num_processes": None, "fsdp_config": None})
    assert filled["deepspeed_config"]["zero_stage"] == 3
    assert filled["fsdp_config"] is None and filled["num_processes"] == 2
    other = _file(tmp_path, "distributed_type: MULTI_CPU\nnum_processes: 2\n", "cpu.yaml")
    monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(other))
    assert "deepspeed_config" not in launcher_defaults({"num_processes": None})


def test_other_distributed_types_stay_refused(tmp_path: Path) -> None:
    path = _file(tmp_path, "distributed_type: MEGATRON_LM\n")
    with pytest.raises(ConfigError, match=r"'distributed_type' asks for MEGATRON_LM.*DEEPSPEED"):
        load_config_file(path, report=None)
