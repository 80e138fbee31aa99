"""The config panel's DeepSpeed section, its "Show code", and the engine on the dashboard."""

from __future__ import annotations

import html
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nbaccel import DeepSpeedPlugin, DistributedType
from nbaccel.deepspeed.checks import check_offload_device, check_stage
from nbaccel.launch.events import EngineEvent
from nbaccel.launch.protocol import Notice, decode, encode
from nbaccel.state.registry import STATE
from nbaccel.testing import reset_state
from nbaccel.widgets import ConfigPanel, DashboardState, Hardware, PanelValues, TextDashboard
from nbaccel.widgets.state import engine_label

CPU2 = Hardware(cpu_cores=2, description="CPU (test, 2 cores)")
GPU4 = Hardware(cpu_cores=8, gpus=4, description="CPU; 4 CUDA GPUs (H100)", gpu_model="H100")
DEEPSPEED_ROWS = (
    "deepspeed_zero_stage",
    "deepspeed_offload_optimizer_device",
    "deepspeed_offload_param_device",
    "deepspeed_config_file",
    "deepspeed_zero3_save_16bit_model",
)


@pytest.fixture(autouse=True)
def _no_deepspeed_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """No DeepSpeed launch variable of the shell fills a field of the plugins built here."""
    prefixes = ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_DEEPSPEED_", "ACCELERATE_GRADIENT_")
    for name in [name for name in os.environ if name.startswith(prefixes)]:
        monkeypatch.delenv(name)


def _panel(tmp_path: Path, hardware: Hardware = CPU2) -> ConfigPanel:
    return ConfigPanel(function=lambda: None, hardware=hardware, path=tmp_path / "c.yaml")


def _shown(panel: ConfigPanel, name: str) -> bool:
    return panel.rows[name].layout.display != "none"


def test_the_sharding_choice_picks_none_fsdp_or_deepspeed_and_shows_its_section(
    tmp_path: Path,
) -> None:
    panel = _panel(tmp_path)
    choice = panel.controls["sharding"]
    assert list(choice.options) == [("None", "none"), ("FSDP", "fsdp"), ("DeepSpeed", "deepspeed")]
    assert choice.value == "none" and not panel.use_fsdp and not panel.use_deepspeed
    assert not any(_shown(panel, name) for name in DEEPSPEED_ROWS)
    assert panel.titles["DeepSpeed"].layout.display == "none"
    choice.value = "deepspeed"  # as the front end does
    assert panel.use_deepspeed and not panel.use_fsdp and panel.sharding == "deepspeed"
    assert all(_shown(panel, name) for name in DEEPSPEED_ROWS)
    assert panel.titles["DeepSpeed"].layout.display is None
    assert panel.titles["FSDP"].layout.display == "none" and not _shown(panel, "fsdp_version")
    assert not _shown(panel, "deepspeed_offload_optimizer_nvme_path")  # only for nvme
    assert panel.errors == {} and not panel.buttons["Launch"].disabled
    choice.value = "fsdp"
    assert panel.use_fsdp and not panel.use_deepspeed
    assert _shown(panel, "fsdp_version") and not _shown(panel, "deepspeed_zero_stage")
    panel.use_fsdp = False  # a trait set from code: the choice follows
    assert choice.value == "none"
    panel.values = PanelValues(num_processes=2, use_deepspeed=True)
    assert choice.value == "deepspeed" and panel.values.use_deepspeed


def test_stage_3_fields_are_enabled_only_for_stage_3_and_nvme_asks_for_its_folder(
    tmp_path: Path,
) -> None:
    panel = _panel(tmp_path)
    panel.sharding = "deepspeed"
    assert panel.deepspeed_zero_stage == 2  # DeepSpeedPlugin's default
    stage = panel.controls["deepspeed_zero_stage"]
    assert [value for _, value in stage.options] == [0, 1, 2, 3]
    param = panel.controls["deepspeed_offload_param_device"]
    save16 = panel.controls["deepspeed_zero3_save_16bit_model"]
    assert list(param.options) == ["none", "cpu", "nvme"]
    assert param.disabled and save16.disabled
    assert not panel.controls["deepspeed_offload_optimizer_device"].disabled
    stage.value = 3
    assert not param.disabled and not save16.disabled
    param.value = "nvme"
    assert _shown(panel, "deepspeed_offload_param_nvme_path")
    assert (
        "needs offload_param_nvme_path, a folder"
        in panel.errors["deepspeed_offload_param_nvme_path"]
    )
    panel.controls["deepspeed_offload_param_nvme_path"].value = "/local_nvme"
    assert panel.errors == {}
    stage.value = 2  # the offload is kept, enabled so that it can be undone, and refused
    assert (
        not param.disabled
        and "needs ZeRO stage 3" in panel.errors["deepspeed_offload_param_device"]
    )
    assert panel.buttons["Launch"].disabled


def _config_file(tmp_path: Path, config: dict[str, Any]) -> str:
    """A new DeepSpeed JSON file holding ``config`` (a new path: the panel sees a change)."""
    path = tmp_path / f"ds_config_{len(list(tmp_path.glob('ds_config_*')))}.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        (
            {"deepspeed_offload_param_device": "cpu"},
            "deepspeed_offload_param_device",
            "offload_param_device='cpu' needs ZeRO stage 3, but the ZeRO stage is 2",
        ),
        (
            {"deepspeed_zero_stage": 0, "deepspeed_offload_optimizer_device": "cpu"},
            "deepspeed_offload_optimizer_device",
            "needs a ZeRO stage of 1 or more, but the ZeRO stage is 0",
        ),
        (
            {"deepspeed_offload_optimizer_device": "nvme"},
            "deepspeed_offload_optimizer_nvme_path",
            "offload_optimizer_device='nvme' needs offload_optimizer_nvme_path, a folder",
        ),
        (
            {"deepspeed_zero_stage": 3, "deepspeed_offload_param_device": "nvme"},
            "deepspeed_offload_param_nvme_path",
            "offload_param_device='nvme' needs offload_param_nvme_path, a folder",
        ),
        ({"deepspeed_zero_stage": 5}, "deepspeed_zero_stage", "is not a ZeRO stage"),
        (
            {"deepspeed_offload_optimizer_device": "disk"},
            "deepspeed_offload_optimizer_device",
            "is not an offload device",
        ),
        ({"deepspeed_config_file": "/nowhere/ds.json"}, "deepspeed_config_file", "no such file"),
        ({"num_processes": 1}, "use_deepspeed", "use 2 or more processes"),
        ({"use_fsdp": True}, "use_deepspeed", "two ways of sharding a model: choose one"),
    ],
)
def test_an_invalid_combination_shows_its_message_before_anything_runs(
    tmp_path: Path, changes: dict[str, object], field: str, words: str
) -> None:
    panel = _panel(tmp_path)
    panel.sharding = "deepspeed"
    for name, value in changes.items():
        setattr(panel, name, value)  # never raises
    assert words in panel.errors[field]
    assert html.escape(words) in panel.messages[field].value  # the label next to the field
    assert panel.buttons["Launch"].disabled
    with pytest.raises(ValueError, match="invalid settings"):
        panel.launch()


def test_the_field_checks_are_the_plugins_own_words(tmp_path: Path) -> None:
    panel = _panel(tmp_path)
    panel.values = PanelValues(
        num_processes=2,
        use_deepspeed=True,
        deepspeed_zero_stage=7,
        deepspeed_offload_optimizer_device="tape",
    )
    with pytest.raises(ValueError) as stage:
        check_stage(7)
    with pytest.raises(ValueError) as device:
        check_offload_device("offload_optimizer_device", "tape")
    assert panel.errors["deepspeed_zero_stage"] == str(stage.value)
    assert panel.errors["deepspeed_offload_optimizer_device"] == str(device.value)


def test_a_json_config_replaces_the_other_fields_and_is_checked_by_the_plugin(
    tmp_path: Path,
) -> None:
    panel = _panel(tmp_path)
    panel.sharding = "deepspeed"
    panel.deepspeed_offload_param_device = "cpu"  # refused at stage 2, until a file decides
    assert "deepspeed_offload_param_device" in panel.errors
    panel.deepspeed_config_file = _config_file(tmp_path, {"train_batch_size": 8})
    assert "has no 'zero_optimization' section" in panel.errors["deepspeed_config_file"]
    assert "deepspeed_offload_param_device" not in panel.errors  # the file holds the offload
    for name in DEEPSPEED_ROWS:  # greyed out: the file holds them
        assert panel.controls[name].disabled == (name != "deepspeed_config_file")
    offloaded = {"stage": 0, "offload_optimizer": {"device": "cpu"}}
    panel.deepspeed_config_file = _config_file(tmp_path, {"zero_optimization": offloaded})
    assert (
        "needs a ZeRO stage of 1 or more, but the ZeRO stage is 0"
        in panel.errors["deepspeed_config_file"]
    )
    offloaded["stage"] = 3
    panel.deepspeed_config_file = _config_file(tmp_path, {"zero_optimization": offloaded})
    assert panel.errors == {} and not panel.buttons["Launch"].disabled
    panel.deepspeed_config_file = ""  # the fields again, and their own check
    assert not panel.controls["deepspeed_zero_stage"].disabled
    assert "needs ZeRO stage 3" in panel.errors["deepspeed_offload_param_device"]


def test_fp8_is_refused_with_the_plugins_message(tmp_path: Path) -> None:
    panel = _panel(tmp_path, GPU4)
    panel.values = PanelValues(device="gpu", num_processes=2, mixed_precision="fp8")
    assert panel.errors == {}
    panel.sharding = "deepspeed"
    assert "trains DeepSpeed in bf16 or fp16" in panel.errors["mixed_precision"]
    panel.mixed_precision = "bf16"
    assert panel.errors == {}


def test_save_writes_the_deepspeed_section_and_load_reads_it_back(tmp_path: Path) -> None:
    panel = _panel(tmp_path)
    panel.sharding = "deepspeed"
    panel.deepspeed_zero_stage = 3
    panel.deepspeed_offload_optimizer_device = "cpu"
    panel.deepspeed_zero3_save_16bit_model = True
    assert panel.errors == {} and not panel.buttons["Launch"].disabled
    panel.buttons["Save"].click()
    written = (tmp_path / "c.yaml").read_text()
    assert "distributed_type: DEEPSPEED" in written and "zero_stage: 3" in written, written
    config = panel.config
    assert config.distributed_type == "DEEPSPEED"
    assert config.deepspeed_config.values["offload_optimizer_device"] == "cpu"
    fresh = _panel(tmp_path)
    fresh.buttons["Load"].click()
    assert fresh.sharding == "deepspeed" and fresh.deepspeed_zero_stage == 3
    assert fresh.deepspeed_offload_optimizer_device == "cpu"
    assert fresh.deepspeed_zero3_save_16bit_model is True


# -- "Show code" -------------------------------------------------------------------------------


def _run_code(code: str) -> dict[str, Any]:
    """Execute the code with the real DeepSpeedPlugin and recorders for the two other calls."""
    seen: dict[str, Any] = {}

    def notebook_launcher(function: Any, args: tuple[Any, ...], **kwargs: Any) -> None:
        seen["launcher"] = kwargs
        function(*args)

    def accelerator(**kwargs: Any) -> None:
        seen["accelerator"] = kwargs

    lines = [line for line in code.splitlines() if not line.startswith("from nbaccel")]
    scope: dict[str, Any] = {
        "notebook_launcher": notebook_launcher,
        "Accelerator": accelerator,
        "DeepSpeedPlugin": DeepSpeedPlugin,
        "args": (),
    }
    exec("\n".join(lines), scope)
    return seen


@pytest.mark.parametrize(
    "values",
    [
        PanelValues(num_processes=2, use_deepspeed=True),
        PanelValues(
            num_processes=2,
            mixed_precision="bf16",
            gradient_accumulation_steps=4,
            use_deepspeed=True,
            deepspeed_zero_stage=3,
            deepspeed_offload_optimizer_device="cpu",
            deepspeed_offload_param_device="cpu",
            deepspeed_zero3_save_16bit_model=True,
        ),
        PanelValues(
            num_processes=2,
            use_deepspeed=True,
            deepspeed_zero_stage=3,
            deepspeed_offload_optimizer_device="nvme",
            deepspeed_offload_optimizer_nvme_path="/nvme/opt",
            deepspeed_offload_param_device="nvme",
            deepspeed_offload_param_nvme_path="/nvme/param",
        ),
        PanelValues(num_processes=2, use_deepspeed=True, deepspeed_zero_stage=1),
    ],
    ids=["stage2", "stage3-cpu-offload-bf16", "stage3-nvme", "stage1"],
)
def test_show_code_builds_the_deepspeed_plugin_with_the_chosen_fields(
    tmp_path: Path, values: PanelValues
) -> None:
    panel = _panel(tmp_path)
    panel.values = values
    assert panel.errors == {}
    panel.buttons["Show code"].click()
    code = panel.code
    compile(code, "<show code>", "exec")  # the whole text is valid Python, imports included
    assert code.startswith("from nbaccel import Accelerator, DeepSpeedPlugin, notebook_launcher\n")
    assert "    deepspeed_plugin = DeepSpeedPlugin(" in code  # inside the training function
    assert "FullyShardedDataParallelPlugin" not in code
    assert all(len(line) <= 100 for line in code.splitlines())
    imported: dict[str, Any] = {}
    exec(code.splitlines()[0], imported)
    assert imported["DeepSpeedPlugin"] is DeepSpeedPlugin
    seen = _run_code(code)
    plugin = seen["accelerator"]["deepspeed_plugin"]
    assert isinstance(plugin, DeepSpeedPlugin)
    assert plugin.zero_stage == values.deepspeed_zero_stage
    assert plugin.offload_optimizer_device == values.deepspeed_offload_optimizer_device
    assert plugin.offload_param_device == values.deepspeed_offload_param_device
    assert plugin.zero3_save_16bit_model == values.deepspeed_zero3_save_16bit_model
    assert plugin.get_value("zero_optimization.stage") == values.deepspeed_zero_stage
    for part in ("optimizer", "param"):
        path = plugin.get_value(f"zero_optimization.offload_{part}.nvme_path")
        assert (path or "") == getattr(values, f"deepspeed_offload_{part}_nvme_path")
    assert seen["accelerator"].get("mixed_precision", "no") == values.mixed_precision
    assert seen["accelerator"]["cpu"] is True
    assert seen["launcher"]["num_processes"] == 2


def test_show_code_passes_the_json_config_alone(tmp_path: Path) -> None:
    path = _config_file(tmp_path, {"zero_optimization": {"stage": 3}, "gradient_clipping": 0.5})
    panel = _panel(tmp_path)
    panel.values = PanelValues(
        num_processes=2, use_deepspeed=True, deepspeed_zero_stage=1, deepspeed_config_file=path
    )
    seen = _run_code(panel.show_code())
    plugin = seen["accelerator"]["deepspeed_plugin"]
    assert plugin.zero_stage == 3 and plugin.gradient_clipping == 0.5  # the file's values
    assert f"hf_ds_config={path!r}" in panel.code and "zero_stage" not in panel.code


@pytest.fixture
def launched_alone(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """This process as a launcher's only rank, its events collected instead of sent."""
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    events: list[Any] = []
    monkeypatch.setattr(STATE, "event_sink", events.append)
    yield events
    reset_state(destroy_process_group=True)


def test_show_codes_accelerator_runs_deepspeed_and_the_rank_reports_its_stage(
    tmp_path: Path, launched_alone: list[Any]
) -> None:
    """The shown code run for real in a launched rank: DeepSpeed with the chosen stage, and
    the one event the dashboard names it from."""
    from nbaccel import Accelerator

    panel = _panel(tmp_path)
    panel.values = PanelValues(num_processes=2, use_deepspeed=True, deepspeed_zero_stage=3)
    accelerators: list[Any] = []
    scope: dict[str, Any] = {
        "Accelerator": lambda **kw: accelerators.append(Accelerator(**kw)),
        "DeepSpeedPlugin": DeepSpeedPlugin,
        "notebook_launcher": lambda function, args, **kw: function(*args),
        "args": (),
    }
    lines = [line for line in panel.show_code().splitlines() if not line.startswith("from")]
    exec("\n".join(lines), scope)
    (accelerator,) = accelerators
    assert accelerator.distributed_type == DistributedType.DEEPSPEED
    assert accelerator.state.deepspeed_plugin.zero_stage == 3
    engines = [e for e in launched_alone if isinstance(e, EngineEvent)]
    assert [(e.rank, e.engine, e.stage) for e in engines] == [(0, "deepspeed", 3)]
    assert decode(encode(Notice(0, engines[0]))).event == engines[0]  # as it travels


# -- the dashboard -----------------------------------------------------------------------------


def test_the_dashboard_state_names_the_engine_and_stage_once_ranks_report_it() -> None:
    now = [100.0]
    state = DashboardState(clock=lambda: now[0])
    state.begin(2)
    now[0] = 101.5
    assert state.headline() == "Running: 2 ranks, 1.5 s elapsed"  # nothing reported yet
    for rank in (0, 1):
        state.handle(EngineEvent(rank=rank, engine="deepspeed", stage=3))
    assert state.ranks[1].engine == "DeepSpeed ZeRO-3"
    assert state.headline() == "Running: 2 ranks (DeepSpeed ZeRO-3), 1.5 s elapsed"
    state.end(None)
    assert state.summary().splitlines()[0] == (
        "Finished: 2 ranks (DeepSpeed ZeRO-3), 1.5 s elapsed"
    )
    state.begin(1)  # a new launch forgets the last one's engine
    assert "DeepSpeed" not in state.headline()
    assert (engine_label("deepspeed", 0), engine_label("deepspeed", None)) == (
        "DeepSpeed ZeRO-0",
        "DeepSpeed",
    )


def test_the_widget_dashboard_and_the_text_one_show_the_stage() -> None:
    from nbaccel.widgets.dashboard import LaunchDashboard

    board = LaunchDashboard(refresh_s=60)
    board.begin(2)
    feed = board.chain(None)
    feed(EngineEvent(rank=0, engine="deepspeed", stage=2))
    board._redraw()
    assert "2 ranks (DeepSpeed ZeRO-2)" in board._title.value
    feed(EngineEvent(rank=1, engine="deepspeed", stage=2))
    board.end(None)
    assert "Finished: 2 ranks (DeepSpeed ZeRO-2)" in board._summary.value
    stream = io.StringIO()
    text = TextDashboard(stream)
    text.begin(2)
    text.chain(None)(EngineEvent(rank=0, engine="deepspeed", stage=3))
    text.end(None)
    assert "nbaccel: Finished: 2 ranks (DeepSpeed ZeRO-3)" in stream.getvalue()
