"""DeepSpeedPlugin, HfDeepSpeedConfig and the rules around them, checked without processes:
every bad field is refused when the plugin is built, naming the field; the launch's variables
fill what is not given; a process on its own sets DeepSpeed aside."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nbaccel import Accelerator, AcceleratorState, DistributedType
from nbaccel.fsdp import FullyShardedDataParallelPlugin
from nbaccel.utils import DeepSpeedPlugin, DummyOptim, DummyScheduler, HfDeepSpeedConfig
from tests.support.deepspeed_configs import TEMPLATES, template


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"zero_stage": 5}, r"zero_stage=5\) is not a ZeRO stage DeepSpeed has"),
        ({"zero_stage": "two"}, r"zero_stage='two'\) must be a whole number"),
        ({"offload_optimizer_device": "gpu"}, r"offload_optimizer_device='gpu'\) is not an"),
        ({"zero_stage": 0, "offload_optimizer_device": "cpu"}, "needs a ZeRO stage of 1 or more"),
        ({"offload_optimizer_device": "nvme"}, "needs offload_optimizer_nvme_path"),
        ({"gradient_accumulation_steps": 0}, "must be at least 1"),
        ({"gradient_clipping": -1.0}, "must be above 0"),
        ({"gradient_clipping": "big"}, "must be a number or 'auto'"),
        ({"zero3_save_16bit_model": "maybe"}, "must be True or False"),
        ({"hf_ds_config": {"train_batch_size": 8}}, "has no 'zero_optimization' section"),
        ({"hf_ds_config": {"zero_optimization": {"stage": 4}}}, r"zero_optimization.stage=4\)"),
        ({"hf_ds_config": "/no/such/ds_config.json"}, "neither a file that exists"),
        ({"hf_ds_config": 3}, "hf_ds_config must be a dict"),
        ({"enable_msamp": True}, "does not run MS-AMP"),
    ],
)
def test_bad_fields_are_refused_when_built(fields: dict, message: str) -> None:
    with pytest.raises(
        (ValueError, TypeError, FileNotFoundError, NotImplementedError), match=message
    ):
        DeepSpeedPlugin(**fields)


def test_without_a_config_the_plugin_writes_one_with_auto_batch_sizes() -> None:
    plugin = DeepSpeedPlugin(
        zero_stage=3, offload_optimizer_device="cpu", zero3_save_16bit_model=True
    )
    config = plugin.deepspeed_config
    assert config["train_batch_size"] == config["train_micro_batch_size_per_gpu"] == "auto"
    assert config["zero_optimization"]["stage"] == 3
    assert config["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "nvme_path": None}
    assert config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    assert plugin.zero3_init_flag is True and plugin.is_zero3_init_enabled()
    assert plugin.is_auto("gradient_accumulation_steps") and plugin.is_auto("gradient_clipping")
    assert plugin.hf_ds_config.is_zero3() and plugin.hf_ds_config.is_offload()


def test_a_config_file_dict_or_base64_text_is_read_and_never_changed(tmp_path: Path) -> None:
    given = template("zero2_offload")
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(given))
    encoded = base64.urlsafe_b64encode(json.dumps(given).encode()).decode()
    for source in (given, str(path), path, encoded, HfDeepSpeedConfig(given)):
        plugin = DeepSpeedPlugin(hf_ds_config=source)
        assert plugin.zero_stage == 2 and plugin.offload_optimizer_device == "cpu"
        assert plugin.gradient_accumulation_steps == 1
        plugin.deepspeed_config["train_batch_size"] = 32
    assert given["train_batch_size"] == "auto"  # the caller's dict stays as it was


def test_the_plugin_fills_the_configs_auto_values_only() -> None:
    config = {"gradient_clipping": "auto", "zero_optimization": {"stage": "auto"}}
    plugin = DeepSpeedPlugin(hf_ds_config=config, zero_stage=3, gradient_clipping=0.5)
    assert plugin.get_value("zero_optimization.stage") == 3 and plugin.zero_stage == 3
    assert plugin.get_value("gradient_clipping") == 0.5
    fixed = DeepSpeedPlugin(hf_ds_config={"zero_optimization": {"stage": 1}}, zero_stage=3)
    assert fixed.zero_stage == 1  # a value the config sets wins, as in Accelerate


def test_process_fills_auto_and_reports_every_mismatch() -> None:
    plugin = DeepSpeedPlugin(
        hf_ds_config={
            "train_batch_size": 16,
            "optimizer": {"params": {"lr": "auto"}},
            "zero_optimization": {},
        }
    )
    with pytest.raises(ValueError, match=r"ds train_batch_size=16 vs arg train_batch_size=8"):
        plugin.deepspeed_config_process(train_batch_size=8, **{"optimizer.params.lr": 0.1})
    plugin.deepspeed_config_process(must_match=False, **{"optimizer.params.lr": 0.1})
    assert plugin.get_value("optimizer.params.lr") == 0.1
    with pytest.raises(ValueError, match=r"optimizer\.params\.lr is 'auto' and nothing fills it"):
        DeepSpeedPlugin(
            hf_ds_config={"optimizer": {"params": {"lr": "auto"}}, "zero_optimization": {}}
        ).deepspeed_config_process()


@pytest.mark.parametrize("precision", ["no", "fp16", "bf16"])
def test_mixed_precision_turns_the_sections_on_and_off(precision: str) -> None:
    plugin = DeepSpeedPlugin()
    plugin.set_mixed_precision(precision)
    assert plugin.get_value("fp16.enabled") == (precision == "fp16")
    assert plugin.get_value("bf16.enabled") == (precision == "bf16")


def test_mixed_precision_that_contradicts_the_config_is_refused() -> None:
    plugin = DeepSpeedPlugin(hf_ds_config=template("zero1"))  # fp16 enabled
    with pytest.raises(ValueError, match='mixed_precision="bf16" contradicts the DeepSpeed config'):
        plugin.set_mixed_precision("bf16")


def test_the_launch_variables_fill_what_is_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "cpu")
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO3_INIT", "false")
    plugin = DeepSpeedPlugin()
    assert (plugin.zero_stage, plugin.offload_param_device) == (3, "cpu")
    assert plugin.gradient_accumulation_steps == 4 and plugin.zero3_init_flag is False
    assert DeepSpeedPlugin(zero_stage=1, offload_param_device="none").zero_stage == 1
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "7")
    with pytest.raises(ValueError, match="zero_stage='7'"):
        DeepSpeedPlugin()


def test_parameter_offload_below_stage_3_is_set_aside_with_a_warning() -> None:
    """Accelerate's own tests pass offload_param_device='cpu' at stage 2, which DeepSpeed
    ignores: nbaccel says so once and sets it to none."""
    with pytest.warns(UserWarning, match="offload_param_device='cpu' needs ZeRO stage 3, but"):
        plugin = DeepSpeedPlugin(zero_stage=2, offload_param_device="cpu")
    assert plugin.offload_param_device == "none"
    assert plugin.get_value("zero_optimization.offload_param.device") == "none"


def test_zero3_init_is_for_stage_3_only() -> None:
    with pytest.warns(UserWarning, match="zero3_init_flag=True\\) applies to ZeRO stage 3 only"):
        plugin = DeepSpeedPlugin(zero_stage=2, zero3_init_flag=True)
    assert plugin.zero3_init_flag is False


@pytest.mark.parametrize("name", TEMPLATES)
def test_accelerates_templates_build_plugins(name: str) -> None:
    plugin = DeepSpeedPlugin(hf_ds_config=template(name))
    assert plugin.zero_stage == int(name[4])
    assert plugin.hf_ds_config.is_offload() == name.endswith("offload")


def test_a_process_on_its_own_sets_deepspeed_aside_with_one_warning() -> None:
    with pytest.warns(UserWarning, match="started on its own.*without DeepSpeed"):
        acc = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
    assert acc.distributed_type == DistributedType.NO
    assert acc.deepspeed_plugin is None and acc.state.deepspeed_plugins is None


def test_deepspeed_and_fsdp_together_are_refused() -> None:
    with pytest.raises(ValueError, match="Both a DeepSpeed plugin and an FSDP plugin"):
        AcceleratorState(
            deepspeed_plugin=DeepSpeedPlugin(), fsdp_plugin=FullyShardedDataParallelPlugin()
        )


def test_dummies_keep_what_they_are_given() -> None:
    params = [object()]
    opt = DummyOptim(params, lr=0.5, weight_decay=0.1, betas=(0.8, 0.9))
    sched = DummyScheduler(opt, total_num_steps=10, warmup_num_steps=2)
    assert (opt.params, opt.lr, opt.weight_decay, opt.kwargs) == (
        params,
        0.5,
        0.1,
        {"betas": (0.8, 0.9)},
    )
    assert (sched.optimizer, sched.total_num_steps, sched.warmup_num_steps) == (opt, 10, 2)


def test_without_deepspeed_installed_the_error_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['deepspeed'] = None\n"
        "from nbaccel.deepspeed import import_deepspeed\n"
        "try:\n    import_deepspeed()\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'nbaccel[deepspeed]'" in out.stdout, out


def test_importing_nbaccel_does_not_import_deepspeed() -> None:
    code = "import nbaccel, nbaccel.utils, sys; print('deepspeed' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
