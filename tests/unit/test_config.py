"""The config file: schema, typos, Accelerate compatibility, locations, FSDP conversion."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nbaccel.config import (
    ConfigError,
    ConfigFile,
    FsdpConfig,
    config_in_force,
    config_location,
    convert_to_fsdp2,
    load_config_file,
    save_config_file,
    write_basic_config,
)

# The example of the Transformers FSDP guide, verbatim (shared with the other test tiers).
GUIDE_YAML = (
    Path(__file__).resolve().parents[1] / "fixtures" / "fsdp_guide_config.yaml"
).read_text()


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Never touch the real ~/.cache: HOME is a temporary folder."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("NBACCEL_CONFIG_FILE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    return home


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_guides_yaml_loads_with_normalised_values(tmp_path: Path) -> None:
    loaded = load_config_file(_write(tmp_path / "guide.yaml", GUIDE_YAML))
    cfg = loaded.config
    assert cfg.distributed_type == "FSDP"
    assert cfg.mixed_precision == "bf16"
    assert cfg.num_processes == 2 and cfg.processes_per_machine == 2
    assert cfg.downcast_bf16 is False  # the string "no"
    fsdp = cfg.fsdp_config.values
    assert fsdp["fsdp_sharding_strategy"] == "FULL_SHARD"  # the number 1
    assert fsdp["fsdp_backward_prefetch"] == "BACKWARD_PRE"  # the old key's new name
    assert cfg.fsdp_config.version == 1
    assert loaded.ignored == ()


def test_an_accelerate_file_with_deepspeed_config_loads_and_is_reported_once(
    tmp_path: Path,
) -> None:
    text = GUIDE_YAML.replace("distributed_type: FSDP", "distributed_type: MULTI_GPU")
    text += (
        "deepspeed_config:\n  zero_stage: 2\nenable_cpu_affinity: true\nmegatron_lm_config: {}\n"
    )
    messages: list[str] = []
    loaded = load_config_file(_write(tmp_path / "acc.yaml", text), report=messages.append)
    assert loaded.ignored == ("deepspeed_config", "enable_cpu_affinity")  # empty ones are quiet
    assert len(messages) == 1
    assert "deepspeed_config, enable_cpu_affinity" in messages[0] and "acc.yaml" in messages[0]


def test_unsupported_distributed_type_is_an_error_naming_key_and_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "mlm.yaml", GUIDE_YAML.replace("FSDP", "MEGATRON_LM"))
    with pytest.raises(ConfigError, match=r"mlm\.yaml: key 'distributed_type' asks for MEGATRON"):
        load_config_file(path)


@pytest.mark.parametrize(
    ("wrong", "right", "expected"),
    [
        (
            "mixed_precision:",
            "mixed_precison:",
            "'mixed_precison' .* Did you mean 'mixed_precision'",
        ),
        ("num_machines:", "num_machine:", "Did you mean 'num_machines'"),
        (
            "fsdp_offload_params:",
            "fsdp_ofload_params:",
            "'fsdp_config.fsdp_ofload_params' .* Did you mean 'fsdp_config.fsdp_offload_params'",
        ),
    ],
)
def test_typos_are_caught_and_the_meant_key_is_named(
    tmp_path: Path, wrong: str, right: str, expected: str
) -> None:
    path = _write(tmp_path / "typo.yaml", GUIDE_YAML.replace(wrong, right))
    with pytest.raises(ConfigError, match=expected) as info:
        load_config_file(path)
    assert str(path) in str(info.value)


def test_an_unknown_key_without_a_close_match_lists_the_known_keys(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'colour' is not a key.*Known keys: .*num_processes"):
        load_config_file(_write(tmp_path / "x.yaml", "colour: blue\n"))


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("num_processes: two\n", "num_processes"),
        ("mixed_precision: fp32\n", "mixed_precision"),
        ("main_process_port: 70000\n", "main_process_port"),
        ("use_cpu: maybe\n", "use_cpu"),
        ("num_machines: 2\nmachine_rank: 2\n", "machine_rank"),
        ("num_machines: 2\nnum_processes: 3\n", "num_processes"),
        ("fsdp_config:\n  fsdp_sharding_strategy: 9\n", "fsdp_config.fsdp_sharding_strategy"),
        ("gradient_accumulation_steps: 0\n", "gradient_accumulation_steps"),
        ("start_method: forkserver\n", "start_method"),
        ("max_restarts: -1\n", "max_restarts"),
    ],
)
def test_bad_values_name_the_key_and_the_file(tmp_path: Path, text: str, key: str) -> None:
    path = _write(tmp_path / "bad.yaml", text)
    with pytest.raises(ConfigError, match=f"bad.yaml: key '{key}'"):
        load_config_file(path)


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    cfg = load_config_file(_write(tmp_path / "g.yaml", GUIDE_YAML)).config
    again = load_config_file(save_config_file(cfg, tmp_path / "out" / "c.yaml")).config
    assert again == cfg


def test_to_fsdp2_converts_a_version_1_config() -> None:
    v1 = FsdpConfig(
        {
            "fsdp_sharding_strategy": "SHARD_GRAD_OP",
            "fsdp_use_orig_params": True,
            "fsdp_offload_params": True,
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        }
    )
    v2, notes = convert_to_fsdp2(v1)
    assert v2.values == {
        "fsdp_version": 2,
        "fsdp_reshard_after_forward": False,
        "fsdp_offload_params": True,
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
    }
    assert any("fsdp_use_orig_params dropped" in n for n in notes)


def test_version_2_refuses_version_1_keys() -> None:
    with pytest.raises(ValueError, match="belongs to FSDP version 1"):
        FsdpConfig({"fsdp_version": 2, "fsdp_sharding_strategy": "FULL_SHARD"})


def test_write_basic_config_writes_defaults_without_initialising_cuda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "basic.yaml"
    monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(target))
    assert write_basic_config(mixed_precision="bf16") == target
    cfg = load_config_file(target).config
    assert cfg.mixed_precision == "bf16" and cfg.compute_environment == "LOCAL_MACHINE"
    assert cfg.num_processes >= 1  # type: ignore[operator]
    assert not torch.cuda.is_initialized()
    assert write_basic_config() is False  # an existing file is left alone
    with pytest.raises(ValueError, match="mixed_precision='fp32'"):
        write_basic_config("fp32", save_location=str(tmp_path / "other.yaml"))


def test_default_location_and_its_overrides(
    tmp_path: Path, _home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert config_location() == (None, "no config file")
    accelerate = _write(
        _home / ".cache/huggingface/accelerate/default_config.yaml", "debug: true\n"
    )
    assert config_location() == (accelerate, "Accelerate default")
    ours = _write(_home / ".cache/nbaccel/default_config.yaml", "debug: false\n")
    assert config_location() == (ours, "nbaccel default")
    named = _write(tmp_path / "named.yaml", "mixed_precision: fp16\n")
    monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(named))
    assert config_location() == (named, "NBACCEL_CONFIG_FILE")
    explicit = _write(tmp_path / "explicit.yaml", "mixed_precision: bf16\n")
    loaded = config_in_force(explicit)
    assert loaded is not None and loaded.config.mixed_precision == "bf16"
    with pytest.raises(ConfigError, match="no such config file"):
        config_in_force(tmp_path / "missing.yaml")


def test_config_file_is_validated_on_construction() -> None:
    assert ConfigFile(distributed_type="tpu").distributed_type == "XLA"
    with pytest.raises(ValueError, match="compute_environment"):
        ConfigFile(compute_environment="AMAZON_SAGEMAKER")


def test_nbaccel_keys_round_trip_and_are_left_out_at_their_defaults(tmp_path: Path) -> None:
    """gradient_accumulation_steps, start_method and max_restarts (the config panel's launch
    fields) are keys of nbaccel's file; at their defaults they are not written, so a file
    nbaccel writes with its defaults has only keys Accelerate's own reader knows."""
    plain = save_config_file(ConfigFile(num_processes=2), tmp_path / "plain.yaml").read_text()
    for key in ("gradient_accumulation_steps", "start_method", "max_restarts"):
        assert key not in plain
    cfg = ConfigFile(gradient_accumulation_steps=4, start_method="SPAWN", max_restarts="2")
    assert (cfg.gradient_accumulation_steps, cfg.start_method, cfg.max_restarts) == (
        4,
        "spawn",
        2,
    )
    path = save_config_file(cfg, tmp_path / "launch.yaml")
    text = path.read_text()
    assert "gradient_accumulation_steps: 4" in text and "start_method: spawn" in text
    assert "max_restarts: 2" in text
    loaded = load_config_file(path)
    assert loaded.config == cfg
    assert {"gradient_accumulation_steps", "start_method", "max_restarts"} <= set(loaded.keys)
    explicit_default = load_config_file(_write(tmp_path / "d.yaml", "max_restarts: 0\n"))
    assert "max_restarts" in explicit_default.keys  # set by the file, even to the default
