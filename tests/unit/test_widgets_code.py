"""The "Show code" output, executed: it builds the same launch and Accelerator settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nbaccel import Accelerator
from nbaccel.config import ConfigFile, FsdpConfig
from nbaccel.launch.config import LaunchConfig
from nbaccel.widgets import ConfigPanel, Hardware, PanelValues
from nbaccel.widgets.codegen import FSDP_ARGUMENTS

CPU2 = Hardware(cpu_cores=2, description="CPU (test, 2 cores)")


def _run_code(code: str) -> dict[str, Any]:
    """Execute the code with recorders for the three calls; return what they received."""
    seen: dict[str, Any] = {}

    def notebook_launcher(function: Any, args: tuple[Any, ...], **kwargs: Any) -> None:
        seen["launcher"] = kwargs
        function(*args)

    def accelerator(**kwargs: Any) -> None:
        seen["accelerator"] = kwargs

    def plugin(**kwargs: Any) -> str:
        seen["plugin"] = kwargs
        return "plugin"

    names = {"notebook_launcher": notebook_launcher, "Accelerator": accelerator}
    lines = [line for line in code.splitlines() if not line.startswith("from nbaccel")]
    scope: dict[str, Any] = {**names, "FullyShardedDataParallelPlugin": plugin, "args": ()}
    exec("\n".join(lines), scope)
    return seen


def _config_from_calls(seen: dict[str, Any]) -> ConfigFile:
    """The config file that the recorded calls stand for."""
    launch, accel = seen["launcher"], seen["accelerator"]
    inverse = {arg: key for key, arg in FSDP_ARGUMENTS.items()}
    fsdp = {}
    for arg, value in seen.get("plugin", {}).items():
        if arg == "transformer_cls_names_to_wrap":
            value = ",".join(value)
        fsdp[inverse[arg]] = value.upper() if arg == "auto_wrap_policy" else value
    per, machines = launch["num_processes"], launch.get("num_nodes", 1)
    world = per * machines
    hosts = launch.get("hosts")
    ranks = world * (len(hosts) if isinstance(hosts, list) else 1)  # num_processes on each host
    kind = "FSDP" if fsdp else ("NO" if ranks == 1 else "MULTI_CPU")
    return ConfigFile(
        distributed_type=kind,
        mixed_precision=accel.get("mixed_precision", "no"),
        use_cpu=launch.get("cpu", False),
        num_processes=world,
        num_machines=machines,
        machine_rank=launch.get("node_rank", 0),
        main_process_ip=launch.get("master_addr"),
        main_process_port=launch.get("use_port"),
        fsdp_config=FsdpConfig(fsdp),
        gradient_accumulation_steps=accel.get("gradient_accumulation_steps", 1),
        start_method=launch.get("start_method", "auto"),
        max_restarts=launch.get("max_restarts", 0),
        hosts=launch.get("hosts"),
        hosts_python=launch.get("python"),
        hosts_cwd=launch.get("cwd"),
    )


@pytest.mark.parametrize(
    "values",
    [
        PanelValues(num_processes=2, mixed_precision="bf16", gradient_accumulation_steps=4),
        PanelValues(num_processes=1, start_method="spawn", max_restarts=2),
        PanelValues(
            num_processes=2,
            num_machines=2,
            machine_rank=1,
            main_process_ip="10.1.2.3",
            main_process_port=29501,
        ),
        PanelValues(
            num_processes=2,
            use_fsdp=True,
            fsdp_transformer_layer_cls_to_wrap="BertLayer,GPT2Block",
            fsdp_activation_checkpointing=True,
        ),
        PanelValues(
            num_processes=2,
            use_fsdp=True,
            fsdp_version=1,
            fsdp_sharding_strategy="SHARD_GRAD_OP",
            fsdp_auto_wrap_policy="SIZE_BASED_WRAP",
            fsdp_min_num_params=1000,
            fsdp_state_dict_type="FULL_STATE_DICT",
        ),
        PanelValues(
            num_processes=1, hosts="node1, user@node2:2222", hosts_python="/opt/py", hosts_cwd="/w"
        ),
    ],
    ids=["bf16-accumulation", "spawn-restarts", "two-machines", "fsdp2", "fsdp1-size", "hosts"],
)
def test_show_code_executed_gives_the_panel_config(tmp_path: Path, values: PanelValues) -> None:
    panel = ConfigPanel(function=lambda: None, hardware=CPU2, path=tmp_path / "c.yaml")
    panel.values = values
    assert panel.errors == {}
    panel.buttons["Show code"].click()
    code = panel.code
    print(code)
    assert "notebook_launcher(" in panel.code_view.value
    compile(code, "<show code>", "exec")  # the whole text is valid Python, imports included
    seen = _run_code(code)
    assert _config_from_calls(seen) == panel.config
    launch = LaunchConfig.build(**seen["launcher"])  # the launcher accepts the call as shown
    assert launch.num_processes == values.num_processes
    assert launch.start_method == values.start_method
    assert launch.max_restarts == values.max_restarts
    assert launch.mixed_precision == values.mixed_precision
    assert seen["accelerator"].get("gradient_accumulation_steps", 1) == (
        values.gradient_accumulation_steps
    )


def test_show_code_accelerator_call_runs_for_real(tmp_path: Path) -> None:
    panel = ConfigPanel(function=lambda: None, hardware=CPU2, path=tmp_path / "c.yaml")
    panel.values = PanelValues(
        num_processes=1, mixed_precision="bf16", gradient_accumulation_steps=3
    )
    seen = _run_code(panel.show_code())
    accelerator = Accelerator(**seen["accelerator"])
    assert accelerator.mixed_precision == "bf16"
    assert accelerator.gradient_accumulation_steps == 3
    assert str(accelerator.device) == "cpu"
