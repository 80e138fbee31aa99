"""The launch's FSDP settings: nbaccel's variable, Accelerate's ``FSDP_*`` variables, the
guide's other spellings and TPU keys, and the plugin's defaults taken from the launch."""

from __future__ import annotations

import pytest
from torch.distributed.fsdp import BackwardPrefetch, ShardingStrategy

from nbaccel import Accelerator
from nbaccel.config import ConfigError, load_config_file
from nbaccel.config.fsdp import FsdpConfig
from nbaccel.config.values import ValueProblem
from nbaccel.environment import fsdp_launch_variables, read_fsdp_launch
from nbaccel.fsdp import FullyShardedDataParallelPlugin as Plugin
from nbaccel.testing import reset_state

# What `accelerate launch` writes for a version-2 file (it writes every variable).
ACCELERATE_V2 = {
    "ACCELERATE_USE_FSDP": "true",
    "FSDP_VERSION": "2",
    "FSDP_SHARDING_STRATEGY": "FULL_SHARD",
    "FSDP_RESHARD_AFTER_FORWARD": "false",
    "FSDP_OFFLOAD_PARAMS": "false",
    "FSDP_MIN_NUM_PARAMS": "0",
    "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP",
    "FSDP_TRANSFORMER_CLS_TO_WRAP": "BertLayer",
    "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT",
    "FSDP_FORWARD_PREFETCH": "false",
    "FSDP_USE_ORIG_PARAMS": "true",
    "FSDP_CPU_RAM_EFFICIENT_LOADING": "false",
    "FSDP_SYNC_MODULE_STATES": "true",
    "FSDP_ACTIVATION_CHECKPOINTING": "false",
}


def test_no_fsdp_launch_reads_as_none() -> None:
    assert read_fsdp_launch({}) is None
    assert read_fsdp_launch({"FSDP_VERSION": "2"}) is None  # without ACCELERATE_USE_FSDP


def test_nbaccels_variable_round_trips_and_is_checked() -> None:
    config = {"fsdp_version": 2, "xla_fsdp_settings": {"compute_dtype": "bfloat16"}}
    variables = fsdp_launch_variables(config)
    assert variables["ACCELERATE_USE_FSDP"] == "true"  # what Transformers looks for
    assert read_fsdp_launch(variables) == config
    with pytest.raises(ValueError, match=r"NBACCEL_FSDP_CONFIG.*not valid JSON"):
        read_fsdp_launch({"NBACCEL_FSDP_CONFIG": "{oops"})


def test_accelerates_variables_are_read_as_its_plugin_reads_them() -> None:
    config = read_fsdp_launch(ACCELERATE_V2)
    assert config is not None
    assert config["fsdp_version"] == "2" and config["fsdp_reshard_after_forward"] == "false"
    assert "fsdp_sharding_strategy" not in config and "fsdp_min_num_params" not in config
    checked = FsdpConfig(config)  # valid as a version-2 fsdp_config
    assert checked.values["fsdp_transformer_layer_cls_to_wrap"] == "BertLayer"
    v1 = read_fsdp_launch(
        {**ACCELERATE_V2, "FSDP_VERSION": "1", "FSDP_AUTO_WRAP_POLICY": "NO_WRAP"}
    )
    assert v1 is not None and v1["fsdp_sharding_strategy"] == "FULL_SHARD"
    assert "fsdp_reshard_after_forward" not in v1 and "fsdp_transformer_layer_cls_to_wrap" not in v1


def test_the_plugin_takes_its_unset_options_from_the_launch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in ACCELERATE_V2.items():
        monkeypatch.setenv(name, value)
    plugin = Plugin()
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is False
    assert plugin.transformer_cls_names_to_wrap == ["BertLayer"]
    assert plugin.state_dict_type.name == "FULL_STATE_DICT"
    own = Plugin(auto_wrap_policy="size_based_wrap", min_num_params=10, reshard_after_forward=True)
    assert own.min_num_params == 10 and own.transformer_cls_names_to_wrap is None
    assert own.reshard_after_forward is True  # given, so the launch's value is not taken
    monkeypatch.setenv(
        "NBACCEL_FSDP_CONFIG",
        '{"fsdp_sharding_strategy": 2, "fsdp_backward_prefetch": "BACKWARD_POST"}',
    )
    v1 = Plugin()
    assert v1.sharding_strategy == ShardingStrategy.SHARD_GRAD_OP
    assert v1.backward_prefetch == BackwardPrefetch.BACKWARD_POST
    assert Plugin(fsdp_version=2).reshard_after_forward is False  # converted: SHARD_GRAD_OP


def test_the_guides_other_spellings_and_tpu_keys_load(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_wrap_policy: SIZE_BASED_WRAP\n"
        "  min_num_param: 2000\n  xla: true\n  xla_fsdp_settings:\n    compute_dtype: bfloat16\n"
        "  xla_fsdp_grad_ckpt: true\n"
    )
    values = load_config_file(path).config.fsdp_config.values
    assert values == {
        "fsdp_auto_wrap_policy": "SIZE_BASED_WRAP",
        "fsdp_min_num_params": 2000,
        "xla": True,
        "xla_fsdp_settings": {"compute_dtype": "bfloat16"},
        "xla_fsdp_grad_ckpt": True,
    }
    with pytest.raises(ValueProblem, match="second time"):
        FsdpConfig({"fsdp_wrap_policy": "NO_WRAP", "fsdp_auto_wrap_policy": "NO_WRAP"})
    path.write_text("fsdp_config:\n  xla: maybe\n")
    with pytest.raises(ConfigError, match=r"fsdp_config\.xla"):
        load_config_file(path)


def test_xla_fsdp_off_a_tpu_is_a_clear_error_at_accelerator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plugin = Plugin(xla=True, xla_fsdp_settings={"compute_dtype": "bfloat16"})
    assert plugin.xla_fsdp_settings == {"compute_dtype": "bfloat16"}
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)  # launched (a job of one), where FSDP applies
    try:
        with pytest.raises(ValueError, match=r"xla: true .*runs on cpu, not on a TPU"):
            Accelerator(cpu=True, fsdp_plugin=plugin)
    finally:
        reset_state(destroy_process_group=True)  # and the process group of one FSDP joined
