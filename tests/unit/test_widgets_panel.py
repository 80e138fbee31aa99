"""ConfigPanel without a front end: values, validation next to fields, buttons, file round trip."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbaccel import Accelerator
from nbaccel.config import load_config_file, resolve_launch
from nbaccel.config.resolve import configured_precision
from nbaccel.environment import fp16_fallback_warning, fp16_unavailable_note
from nbaccel.launch.config import LaunchConfig
from nbaccel.widgets import ConfigPanel, Hardware, PanelValues

CPU2 = Hardware(cpu_cores=2, description="CPU (test, 2 cores)")
GPU4 = Hardware(cpu_cores=8, gpus=4, description="CPU; 4 CUDA GPUs (H100)", gpu_model="H100")


def test_defaults_follow_the_hardware_and_are_valid(tmp_path: Path) -> None:
    panel = ConfigPanel(hardware=CPU2, path=tmp_path / "c.yaml")
    assert panel.device == "cpu" and panel.num_processes == 2 and panel.errors == {}
    assert list(panel.controls["device"].options) == [("CPU", "cpu")]
    assert list(panel.controls["mixed_precision"].options) == ["no", "bf16"]
    gpu = ConfigPanel(hardware=GPU4, path=tmp_path / "g.yaml")
    assert gpu.device == "gpu"
    assert list(gpu.controls["mixed_precision"].options) == ["no", "fp16", "bf16", "fp8"]


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"num_processes": 3}, "num_processes", "at most 2: this machine has 2 CPU cores"),
        ({"num_processes": 0}, "num_processes", "at least 1"),
        ({"mixed_precision": "fp16"}, "mixed_precision", "fp16 does not train on the CPU"),
        ({"mixed_precision": "fp8"}, "mixed_precision", "not supported on CPU"),
        ({"device": "gpu"}, "device", "no GPU"),
        ({"num_machines": 2}, "main_process_ip", "address of machine 0"),
        ({"num_machines": 2, "machine_rank": 2}, "machine_rank", "between 0 and 1"),
        ({"gradient_accumulation_steps": 0}, "gradient_accumulation_steps", "at least 1"),
        ({"max_restarts": -1}, "max_restarts", "0 or more"),
        ({"use_fsdp": True}, "fsdp_transformer_layer_cls_to_wrap", "layer class name"),
        (
            {
                "use_fsdp": True,
                "fsdp_auto_wrap_policy": "SIZE_BASED_WRAP",
                "fsdp_min_num_params": 0,
            },
            "fsdp_min_num_params",
            "minimum number",
        ),
        ({"use_fsdp": True, "fsdp_offload_params": True}, "fsdp_offload_params", "needs a GPU"),
        (
            {"use_fsdp": True, "fsdp_state_dict_type": "LOCAL_STATE_DICT"},
            "fsdp_state_dict_type",
            "FSDP 2",
        ),
        ({"use_fsdp": True, "num_processes": 1}, "use_fsdp", "2 or more processes"),
        ({"hosts": "node1, -oProxyCommand=x"}, "hosts", "is not a host ssh can reach"),
        ({"hosts": "node1, node1"}, "hosts", "twice; name each machine once"),
        ({"hosts": "node1:0"}, "hosts", "a port is a number from 1 to 65535"),
        ({"hosts": "node1", "num_machines": 2}, "hosts", "Machines and Machine rank do not apply"),
        (
            {"hosts": "node1, node2", "num_processes": 1, "display_ranks": "2"},
            "display_ranks",
            "ranks 0..1 exist with 2 process(es)",
        ),
    ],
)
def test_an_invalid_value_shows_its_message_next_to_the_field(
    tmp_path: Path, changes: dict[str, object], field: str, words: str
) -> None:
    panel = ConfigPanel(hardware=CPU2, path=tmp_path / "c.yaml", function=print)
    for name, value in changes.items():
        setattr(panel, name, value)  # never raises
    assert words in panel.errors[field]
    assert words in panel.messages[field].value  # the label next to the field
    assert panel.buttons["Launch"].disabled
    with pytest.raises(ValueError, match="not valid"):
        _ = panel.config


def test_fp16_on_the_cpu_is_refused_by_the_rule_and_words_of_accelerator_and_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A config file that says fp16 on a CPU-only machine: the panel refuses it with the
    words of the warning that Accelerator() and notebook_launcher give for the same file."""
    path = tmp_path / "cpu_fp16.yaml"
    path.write_text("use_cpu: true\nnum_processes: 2\nmixed_precision: fp16\n")
    monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(path))
    panel = ConfigPanel(hardware=CPU2, path=path)
    panel.load()
    assert panel.mixed_precision == "fp16"
    refusal = panel.errors["mixed_precision"]
    assert refusal == f"{fp16_unavailable_note('cpu')}; use no, bf16"
    assert "fp16" in list(panel.controls["mixed_precision"].options)  # shown as loaded
    with pytest.warns(UserWarning) as launcher:
        assert LaunchConfig.build(num_processes=None).mixed_precision == "fp16"
    with pytest.warns(UserWarning) as accelerator:
        assert Accelerator(cpu=True).mixed_precision == "fp16"  # as Accelerate reports it
    for caught in (launcher, accelerator):
        assert [str(w.message) for w in caught] == [fp16_fallback_warning("cpu")]
        assert fp16_unavailable_note("cpu") in str(caught[0].message)
    panel.mixed_precision = "bf16"
    assert panel.errors == {}


def test_editing_the_control_updates_the_panel_and_clears_the_message(tmp_path: Path) -> None:
    panel = ConfigPanel(hardware=CPU2, path=tmp_path / "c.yaml")
    panel.controls["num_processes"].value = 5  # as the front end does
    assert panel.num_processes == 5 and "num_processes" in panel.errors
    panel.controls["num_processes"].value = 2
    assert panel.errors == {} and panel.messages["num_processes"].value == ""


def test_fsdp_fields_show_only_what_applies(tmp_path: Path) -> None:
    panel = ConfigPanel(hardware=GPU4, path=tmp_path / "c.yaml")
    display = lambda name: panel.rows[name].layout.display  # noqa: E731
    assert display("fsdp_version") == "none"
    panel.use_fsdp = True
    assert display("fsdp_reshard_after_forward") is None
    assert display("fsdp_sharding_strategy") == "none"
    assert display("fsdp_offload_params") is None  # a GPU: offload is offered
    panel.fsdp_version = 1
    assert display("fsdp_sharding_strategy") is None
    panel.fsdp_auto_wrap_policy = "SIZE_BASED_WRAP"
    assert display("fsdp_min_num_params") is None
    assert display("fsdp_transformer_layer_cls_to_wrap") == "none"
    cpu = ConfigPanel(hardware=CPU2, path=tmp_path / "d.yaml")
    cpu.use_fsdp = True
    assert cpu.rows["fsdp_offload_params"].layout.display == "none"  # no GPU: no offload


def test_save_and_load_round_trip_through_the_file_the_cli_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "default_config.yaml"
    monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(path))
    panel = ConfigPanel(hardware=GPU4)
    assert panel.path_text.value == str(path)  # the CLI's write location
    panel.values = PanelValues(
        device="gpu",
        num_processes=4,
        num_machines=2,
        machine_rank=1,
        main_process_ip="10.0.0.1",
        main_process_port=29500,
        mixed_precision="bf16",
        use_fsdp=True,
        fsdp_version=1,
        fsdp_sharding_strategy="HYBRID_SHARD",
        fsdp_auto_wrap_policy="SIZE_BASED_WRAP",
        fsdp_min_num_params=2000,
        fsdp_offload_params=True,
        fsdp_state_dict_type="FULL_STATE_DICT",
        fsdp_activation_checkpointing=True,
    )
    assert panel.errors == {}
    panel.buttons["Save"].click()
    assert "Saved" in panel.status_text.value
    loaded = load_config_file(path)
    assert loaded.config == panel.config
    assert loaded.config.distributed_type == "FSDP" and loaded.config.num_processes == 8
    assert loaded.config.fsdp_config.values["fsdp_sharding_strategy"] == "HYBRID_SHARD"
    assert configured_precision() == "bf16"  # what Accelerator() falls back on
    resolved = resolve_launch({"num_processes": None}, loaded)
    assert resolved.processes_per_machine == 4 and resolved.config.machine_rank == 1
    other = ConfigPanel(hardware=GPU4)
    other.buttons["Load"].click()
    assert "Loaded" in other.status_text.value
    assert other.values == panel.values and other.config == panel.config


def test_launch_fields_round_trip_and_are_honoured_where_the_file_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gradient accumulation, start method and restarts go through the CLI's file, and
    notebook_launcher, Accelerator() and nbaccel launch take them when not given."""
    path = tmp_path / "default_config.yaml"
    monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(path))
    panel = ConfigPanel(hardware=CPU2)
    panel.values = PanelValues(
        num_processes=2, gradient_accumulation_steps=4, start_method="spawn", max_restarts=2
    )
    assert panel.errors == {}
    panel.save()
    text = path.read_text()
    assert "gradient_accumulation_steps: 4" in text and "start_method: spawn" in text
    assert "max_restarts: 2" in text
    other = ConfigPanel(hardware=CPU2)
    other.load()
    assert other.values == panel.values
    assert (other.gradient_accumulation_steps, other.start_method, other.max_restarts) == (
        4,
        "spawn",
        2,
    )
    launch = LaunchConfig.build(num_processes=None, cpu=True)  # notebook_launcher's defaults
    assert (launch.num_processes, launch.start_method, launch.max_restarts) == (2, "spawn", 2)
    given = LaunchConfig.build(cpu=True, start_method="fork", max_restarts=0)
    assert (given.start_method, given.max_restarts) == ("fork", 0)  # explicit beats the file
    assert Accelerator(cpu=True).gradient_accumulation_steps == 4
    assert resolve_launch({"max_restarts": None}, load_config_file(path)).max_restarts == 2
    assert resolve_launch({"max_restarts": 1}, load_config_file(path)).max_restarts == 1


def test_hosts_round_trip_and_are_the_launchers_default_where_the_file_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hosts field (and the interpreter and directory there) go through the file the CLI
    reads; notebook_launcher and nbaccel launch take them when not given."""
    path = tmp_path / "default_config.yaml"
    monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(path))
    panel = ConfigPanel(hardware=CPU2, function=print)
    panel.controls["hosts"].value = "node1, root@node2:2222"  # as the front end does
    panel.controls["num_processes"].value = 4  # per host: this machine's 2 cores do not bound it
    panel.hosts_python = "/opt/venv/bin/python"
    assert panel.errors == {} and not panel.buttons["Launch"].disabled
    assert panel.launch_options["hosts"] == ["node1", "root@node2:2222"]
    assert panel.launch_options["python"] == "/opt/venv/bin/python"
    assert "cwd" not in panel.launch_options
    panel.save()
    text = path.read_text()
    assert "hosts:\n- node1\n- root@node2:2222\n" in text and "hosts_cwd" not in text
    other = ConfigPanel(hardware=CPU2)
    other.load()
    assert other.values == panel.values and other.hosts == "node1, root@node2:2222"
    launch = LaunchConfig.build(num_processes=None, hosts=None)  # notebook_launcher's defaults
    assert launch.hosts is not None and launch.hosts.python == "/opt/venv/bin/python"
    assert [t.entry for t in launch.hosts.targets] == ["node1", "root@node2:2222"]
    assert (launch.num_processes, launch.world_size) == (4, 8)
    resolved = resolve_launch({}, load_config_file(path))
    assert resolved.config.hosts == ["node1", "root@node2:2222"]
    assert resolved.processes_per_machine == 4
    other.hosts = "slurm"
    assert other.errors == {} and other.config.hosts == "slurm"
    other.hosts = ""  # this machine again: its 2 cores bound the processes
    assert "at most 2" in other.errors["num_processes"]
    other.num_processes = 2
    assert other.config.hosts is None and "hosts" not in other.launch_options


def test_load_of_a_missing_file_shows_a_message(tmp_path: Path) -> None:
    panel = ConfigPanel(hardware=CPU2, path=tmp_path / "missing.yaml")
    panel.buttons["Load"].click()
    assert "no such config file" in panel.status_text.value


def test_launch_button_runs_the_function_on_the_panel_settings(tmp_path: Path) -> None:
    panel = ConfigPanel(function=lambda x: x * 2, args=(21,), hardware=CPU2, path=tmp_path / "c")
    panel.num_processes = 1
    panel.buttons["Launch"].click()
    assert panel.wait(60) == [42]
    assert panel.dashboard is not None and panel.dashboard.status == "finished"
    assert panel.children[-1] is panel.dashboard
    assert "Launch" not in ConfigPanel(hardware=CPU2, path=tmp_path / "c").buttons


def test_without_ipywidgets_or_outside_a_notebook_the_dashboard_is_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    import nbaccel.environment as environment
    from nbaccel.widgets import TextDashboard, launch_dashboard

    assert isinstance(launch_dashboard(), TextDashboard)  # pytest is not a notebook
    monkeypatch.setattr(environment, "in_notebook", lambda: True)
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import ipywidgets fails
    assert isinstance(launch_dashboard(), TextDashboard)
