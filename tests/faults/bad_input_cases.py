"""The table of bad inputs for every public entry point (point 6 of the fault tests).

Each case is (id, call, expected exception types, text the message must hold). ``call`` takes
the working directory of the test and must raise before anything starts or is written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nbaccel import (
    Accelerator,
    AutocastKwargs,
    DataLoaderConfiguration,
    DistributedDataParallelKwargs,
    GradientAccumulationPlugin,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProjectConfiguration,
    TorchDynamoPlugin,
    debug_launcher,
    notebook_launcher,
)

V, T = ValueError, TypeError
VT = (ValueError, TypeError)


@dataclass(frozen=True)
class Case:
    """One bad call: it must raise one of ``errors`` with ``names`` in the message."""

    id: str
    call: Callable[[Path], Any]
    errors: type[BaseException] | tuple[type[BaseException], ...]
    names: str
    setup: Callable[[Path], Any] | None = None


def _never(*args: Any) -> None:  # the function a bad launch must never run
    raise AssertionError("a launch with a bad argument ran the function")


def nl(**kwargs: Any) -> Callable[[Path], Any]:
    kwargs.setdefault("num_processes", 2)
    return lambda _: notebook_launcher(_never, **kwargs)


def acc(**kwargs: Any) -> Callable[[Path], Any]:
    return lambda _: Accelerator(**kwargs)


def _prepared() -> tuple[Accelerator, nn.Module, Any]:
    accelerator = Accelerator()
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    return accelerator, model, optimizer


def prepared(action: Callable[[Accelerator, nn.Module, Path], Any]) -> Callable[[Path], Any]:
    def call(cwd: Path) -> Any:
        accelerator, model, _ = _prepared()
        return action(accelerator, model, cwd)

    return call


def _foreign_optimizer(cwd: Path) -> Any:
    accelerator = Accelerator()
    model = nn.Linear(2, 1)
    other = torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1)
    return accelerator.prepare(model, other)


def _prepare_twice(cwd: Path) -> Any:
    accelerator = Accelerator()
    model = accelerator.prepare(nn.Linear(2, 1))
    return accelerator.prepare(model)


def _existing_checkpoint(cwd: Path) -> Any:
    accelerator = Accelerator(
        project_config=ProjectConfiguration(project_dir=str(cwd), automatic_checkpoint_naming=True)
    )
    return accelerator.save_state()


def _make_checkpoint_0(cwd: Path) -> None:
    (cwd / "checkpoints" / "checkpoint_0").mkdir(parents=True)


CASES: list[Case] = [
    # -- notebook_launcher: every parameter, a wrong type and a wrong value ------------------
    Case("nl-function-type", lambda _: notebook_launcher(42), T, "function"),
    Case("nl-args-type", lambda _: notebook_launcher(_never, 5), T, "args"),
    Case("nl-args-value", lambda _: notebook_launcher(_never, "ab"), T, "args"),
    Case("nl-num_processes-type", nl(num_processes="2"), T, "num_processes"),
    Case("nl-num_processes-value", nl(num_processes=0), V, "num_processes"),
    Case("nl-num_processes-bool", nl(num_processes=True), T, "num_processes"),
    Case("nl-mixed_precision-type", nl(mixed_precision=16), VT, "mixed_precision"),
    Case("nl-mixed_precision-value", nl(mixed_precision="fp32"), V, "mixed_precision"),
    Case("nl-use_port-type", nl(use_port=12.5), T, "use_port"),
    Case("nl-use_port-value", nl(use_port=70000), V, "use_port"),
    Case("nl-master_addr-type", nl(master_addr=127), VT, "master_addr"),
    Case("nl-master_addr-value", nl(master_addr="  "), V, "master_addr"),
    Case("nl-node_rank-type", nl(node_rank="0"), T, "node_rank"),
    Case("nl-node_rank-value", nl(node_rank=1), V, "node_rank"),
    Case("nl-num_nodes-type", nl(num_nodes=2.0), T, "num_nodes"),
    Case("nl-num_nodes-value", nl(num_nodes=0), V, "num_nodes"),
    Case("nl-node_timeout-value", nl(num_nodes=2, node_timeout=0), V, "node_timeout"),
    Case("nl-rdzv_backend-type", nl(rdzv_backend=1), VT, "rdzv_backend"),
    Case("nl-rdzv_backend-value", nl(rdzv_backend="etcd"), V, "rdzv_backend"),
    Case("nl-rdzv_endpoint-type", nl(rdzv_endpoint=29500), VT, "rdzv_endpoint"),
    Case("nl-rdzv_endpoint-value", nl(rdzv_endpoint="localhost"), V, "rdzv_endpoint"),
    Case("nl-rdzv_endpoint-port", nl(rdzv_endpoint="h:99999"), V, "rdzv_endpoint"),
    Case("nl-rdzv_conf-type", nl(rdzv_conf=[1]), T, "rdzv_conf"),
    Case("nl-rdzv_id-type", nl(rdzv_id=7), VT, "rdzv_id"),
    Case("nl-rdzv_id-value", nl(rdzv_id=""), V, "rdzv_id"),
    Case("nl-max_restarts-type", nl(max_restarts="1"), T, "max_restarts"),
    Case("nl-max_restarts-value", nl(max_restarts=-1), V, "max_restarts"),
    Case("nl-monitor_interval-type", nl(monitor_interval="fast"), T, "monitor_interval"),
    Case("nl-monitor_interval-value", nl(monitor_interval=0), V, "monitor_interval"),
    Case("nl-prefix-type", nl(log_line_prefix_template=5), VT, "log_line_prefix_template"),
    Case("nl-prefix-value", nl(log_line_prefix_template="${nope}"), V, "nope"),
    Case("nl-start_method-type", nl(start_method=5), VT, "start_method"),
    Case("nl-start_method-value", nl(start_method="forkserver"), V, "start_method"),
    Case("nl-timeout-type", nl(timeout="10"), T, "timeout"),
    Case("nl-timeout-value", nl(timeout=-1), V, "timeout"),
    Case("nl-rendezvous_timeout-type", nl(rendezvous_timeout=None), T, "rendezvous_timeout"),
    Case("nl-rendezvous_timeout-value", nl(rendezvous_timeout=0), V, "rendezvous_timeout"),
    Case("nl-cpu-type", nl(cpu="yes"), T, "cpu"),
    Case("nl-debug-type", nl(debug=1), T, "debug"),
    Case("nl-kwargs-type", nl(kwargs=[("a", 1)]), T, "kwargs"),
    Case("nl-on_event-type", nl(on_event="print"), T, "on_event"),
    # -- debug_launcher --------------------------------------------------------------------
    Case("dl-function-type", lambda _: debug_launcher("train"), T, "function"),
    Case("dl-args-type", lambda _: debug_launcher(_never, 3), T, "args"),
    Case("dl-num_processes-type", lambda _: debug_launcher(_never, (), "2"), T, "num_processes"),
    Case("dl-num_processes-value", lambda _: debug_launcher(_never, (), -2), V, "num_processes"),
    # -- Accelerator -----------------------------------------------------------------------
    Case("acc-mixed_precision-type", acc(mixed_precision=16), VT, "mixed_precision"),
    Case("acc-mixed_precision-value", acc(mixed_precision="fp32"), V, "mixed_precision"),
    Case("acc-gas-type", acc(gradient_accumulation_steps="2"), VT, "gradient_accumulation_steps"),
    Case("acc-gas-value", acc(gradient_accumulation_steps=0), V, "gradient_accumulation_steps"),
    Case(
        "acc-gas-and-plugin",
        acc(
            gradient_accumulation_steps=2,
            gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=2),
        ),
        V,
        "gradient_accumulation_plugin",
    ),
    Case("acc-cpu-type", acc(cpu="no"), T, "cpu"),
    Case("acc-device_placement-type", acc(device_placement="yes"), T, "device_placement"),
    Case(
        "acc-dataloader_config-type",
        acc(dataloader_config={"split_batches": True}),
        T,
        "dataloader_config",
    ),
    Case("acc-rng_types-value", acc(rng_types=["dice"]), V, "rng_types"),
    Case("acc-rng_types-type", acc(rng_types="generator"), VT, "rng_types"),
    Case("acc-log_with-value", acc(log_with="nope"), V, "log_with"),
    Case("acc-project_config-type", acc(project_config="runs"), T, "project_config"),
    Case("acc-project_dir-type", acc(project_dir=5), T, "project_dir"),
    Case("acc-kwargs_handlers-type", acc(kwargs_handlers=[object()]), T, "kwargs_handlers"),
    Case(
        "acc-kwargs_handlers-value",
        acc(kwargs_handlers=[AutocastKwargs(), AutocastKwargs()]),
        V,
        "kwargs_handlers",
    ),
    Case("acc-dynamo_backend-value", acc(dynamo_backend="warp"), V, "backend"),
    Case("acc-dynamo_backend-type", acc(dynamo_backend=3), VT, "backend"),
    Case("acc-dynamo_plugin-type", acc(dynamo_plugin="inductor"), T, "dynamo_plugin"),
    Case("acc-fsdp_plugin-type", acc(fsdp_plugin="full"), T, "fsdp_plugin"),
    Case(
        "acc-step_scheduler-type",
        acc(step_scheduler_with_optimizer="y"),
        T,
        "step_scheduler_with_optimizer",
    ),
    Case("acc-even_batches-type", acc(even_batches="no"), T, "even_batches"),
    Case("acc-split_batches-type", acc(split_batches=1), T, "split_batches"),
    # -- plugins and kwargs handlers -------------------------------------------------------
    Case("gap-num_steps-type", lambda _: GradientAccumulationPlugin(num_steps="2"), T, "num_steps"),
    Case("gap-num_steps-value", lambda _: GradientAccumulationPlugin(num_steps=0), V, "num_steps"),
    Case(
        "gap-adjust-type",
        lambda _: GradientAccumulationPlugin(adjust_scheduler=1),
        T,
        "adjust_scheduler",
    ),
    Case("pc-total_limit-type", lambda _: ProjectConfiguration(total_limit="3"), T, "total_limit"),
    Case("pc-total_limit-value", lambda _: ProjectConfiguration(total_limit=0), V, "total_limit"),
    Case("pc-iteration-type", lambda _: ProjectConfiguration(iteration=1.5), T, "iteration"),
    Case("pc-iteration-value", lambda _: ProjectConfiguration(iteration=-1), V, "iteration"),
    Case("pc-project_dir-type", lambda _: ProjectConfiguration(project_dir=3), T, "project_dir"),
    Case(
        "pc-automatic-type",
        lambda _: ProjectConfiguration(automatic_checkpoint_naming="y"),
        T,
        "automatic_checkpoint_naming",
    ),
    Case("tdp-backend-value", lambda _: TorchDynamoPlugin(backend="warp"), V, "backend"),
    Case("tdp-mode-value", lambda _: TorchDynamoPlugin(mode="fastest"), V, "mode"),
    Case("tdp-fullgraph-type", lambda _: TorchDynamoPlugin(fullgraph="yes"), T, "fullgraph"),
    Case(
        "dlc-split_batches-type",
        lambda _: DataLoaderConfiguration(split_batches="y"),
        T,
        "split_batches",
    ),
    Case("dlc-data_seed-type", lambda _: DataLoaderConfiguration(data_seed="7"), T, "data_seed"),
    Case("ipg-backend-type", lambda _: InitProcessGroupKwargs(backend=1), T, "backend"),
    Case("ipg-backend-value", lambda _: InitProcessGroupKwargs(backend="tcp"), V, "backend"),
    Case("ipg-timeout-type", lambda _: InitProcessGroupKwargs(timeout="60"), T, "timeout"),
    Case("ipg-timeout-value", lambda _: InitProcessGroupKwargs(timeout=-5), V, "timeout"),
    Case("ipg-init_method-type", lambda _: InitProcessGroupKwargs(init_method=5), T, "init_method"),
    Case(
        "ddp-bucket-value",
        lambda _: DistributedDataParallelKwargs(bucket_cap_mb=0),
        V,
        "bucket_cap_mb",
    ),
    Case(
        "ddp-bucket-type",
        lambda _: DistributedDataParallelKwargs(bucket_cap_mb="25"),
        T,
        "bucket_cap_mb",
    ),
    Case(
        "ddp-find_unused-type",
        lambda _: DistributedDataParallelKwargs(find_unused_parameters="yes"),
        T,
        "find_unused_parameters",
    ),
    Case("gsk-init_scale-value", lambda _: GradScalerKwargs(init_scale=0), V, "init_scale"),
    Case("gsk-init_scale-type", lambda _: GradScalerKwargs(init_scale="big"), T, "init_scale"),
    Case(
        "gsk-growth_interval-value",
        lambda _: GradScalerKwargs(growth_interval=0),
        V,
        "growth_interval",
    ),
    Case("ack-enabled-type", lambda _: AutocastKwargs(enabled="yes"), T, "enabled"),
    # -- prepare, save_state / load_state, save_model ---------------------------------------
    Case(
        "prepare-device_placement-type",
        prepared(lambda a, m, c: a.prepare(nn.Linear(2, 1), device_placement=True)),
        T,
        "device_placement",
    ),
    Case(
        "save_state-output_dir-missing", prepared(lambda a, m, c: a.save_state()), V, "output_dir"
    ),
    Case(
        "save_state-output_dir-type", prepared(lambda a, m, c: a.save_state(123)), T, "output_dir"
    ),
    Case(
        "save_state-safe-type",
        prepared(lambda a, m, c: a.save_state(c / "ck", safe_serialization="yes")),
        T,
        "safe_serialization",
    ),
    Case(
        "save_state-existing-checkpoint",
        _existing_checkpoint,
        V,
        "already exists",
        setup=_make_checkpoint_0,
    ),
    Case(
        "load_state-input_dir-value",
        prepared(lambda a, m, c: a.load_state(c / "missing")),
        FileNotFoundError,
        "missing",
    ),
    Case("load_state-input_dir-type", prepared(lambda a, m, c: a.load_state(3.5)), T, "input_dir"),
    Case("load_state-no-dir", prepared(lambda a, m, c: a.load_state()), V, "input_dir"),
    Case(
        "save_model-model-type",
        prepared(lambda a, m, c: a.save_model("model", c / "export")),
        T,
        "model",
    ),
    Case(
        "save_model-dir-type", prepared(lambda a, m, c: a.save_model(m, None)), T, "save_directory"
    ),
    Case(
        "save_model-shard-value",
        prepared(lambda a, m, c: a.save_model(m, c / "export", max_shard_size="lots")),
        V,
        "max_shard_size",
    ),
    Case(
        "save_model-shard-type",
        prepared(lambda a, m, c: a.save_model(m, c / "export", max_shard_size=[1])),
        VT,
        "max_shard_size",
    ),
    Case(
        "register-no-state_dict",
        prepared(lambda a, m, c: a.register_for_checkpointing(object())),
        V,
        "state_dict",
    ),
]

# Cases that show a bug (kept as strict xfails until nbaccel is fixed): id -> what is wrong.
BUGS: dict[str, str] = {}

# The command line: argv, the text stderr must hold. Each must exit with code 2.
CLI_CASES: list[tuple[str, list[str], str]] = [
    ("launch-num_processes-type", ["launch", "--num_processes", "abc", "s.py"], "--num_processes"),
    ("launch-num_processes-value", ["launch", "--num_processes", "0", "s.py"], "num_processes"),
    (
        "launch-mixed_precision-value",
        ["launch", "--mixed_precision", "fp32", "s.py"],
        "mixed_precision",
    ),
    ("launch-max_restarts-type", ["launch", "--max_restarts", "x", "s.py"], "--max_restarts"),
    ("launch-max_restarts-value", ["launch", "--max_restarts", "-1", "s.py"], "max_restarts"),
    (
        "launch-monitor_interval-type",
        ["launch", "--monitor_interval", "x", "s.py"],
        "--monitor_interval",
    ),
    (
        "launch-monitor_interval-value",
        ["launch", "--monitor_interval", "-1", "s.py"],
        "monitor_interval",
    ),
    ("launch-machine_rank-value", ["launch", "--machine_rank", "5", "s.py"], "machine_rank"),
    ("launch-port-value", ["launch", "--main_process_port", "99999", "s.py"], "main_process_port"),
    ("launch-port-type", ["launch", "--main_process_port", "abc", "s.py"], "main_process_port"),
    ("launch-num_machines-value", ["launch", "--num_machines", "0", "s.py"], "num_machines"),
    ("launch-rdzv_backend-value", ["launch", "--rdzv_backend", "etcd", "s.py"], "rdzv_backend"),
    ("launch-gpu_ids-value", ["launch", "--gpu_ids", "x,y", "s.py"], "gpu_ids"),
    (
        "launch-dynamo_backend-value",
        ["launch", "--dynamo_backend", "warp", "s.py"],
        "dynamo_backend",
    ),
    (
        "launch-fsdp-value",
        ["launch", "--fsdp_sharding_strategy", "HALF", "s.py"],
        "fsdp_sharding_strategy",
    ),
    ("launch-typo-option", ["launch", "--num_procs", "2", "s.py"], "--num_processes"),
    ("launch-no-script", ["launch"], "script"),
    ("unknown-command", ["bogus"], "COMMAND"),
    (
        "config-default-value",
        ["config", "default", "--mixed_precision", "fp32"],
        "--mixed_precision",
    ),
    ("config-num_processes-type", ["config", "--num_processes", "abc"], "num_processes"),
    ("config-mixed_precision-value", ["config", "--mixed_precision", "fp32"], "mixed_precision"),
    # the config file (written by the test as cfg.yaml)
    ("file-unknown-key", ["launch", "--config_file", "typo.yaml", "s.py"], "mixed_precison"),
    ("file-bad-value", ["launch", "--config_file", "negative.yaml", "s.py"], "num_processes"),
    ("file-unsupported", ["launch", "--config_file", "megatron.yaml", "s.py"], "distributed_type"),
    ("file-broken-yaml", ["launch", "--config_file", "broken.yaml", "s.py"], "broken.yaml"),
    ("file-missing", ["launch", "--config_file", "missing.yaml", "s.py"], "missing.yaml"),
    ("test-file-unknown-key", ["test", "--config_file", "typo.yaml"], "mixed_precison"),
    (
        "to-fsdp2-file-unknown-key",
        ["to-fsdp2", "--config_file", "typo.yaml", "--output_file", "o.yaml"],
        "mixed_precison",
    ),
]

CLI_BUGS: dict[str, str] = {}

CONFIG_FILES: dict[str, str] = {
    "typo.yaml": "mixed_precison: bf16\n",
    "negative.yaml": "num_processes: -3\n",
    "megatron.yaml": "distributed_type: MEGATRON_LM\n",
    "broken.yaml": "mixed_precision: [1\n",
}

# notebook_launcher and Accelerator() reading a bad config file (NBACCEL_CONFIG_FILE).
FILE_CASES: list[tuple[str, str, str]] = [
    ("launcher-unknown-key", "typo.yaml", "mixed_precison"),
    ("launcher-bad-value", "negative.yaml", "num_processes"),
    ("launcher-unsupported", "megatron.yaml", "distributed_type"),
    ("launcher-broken-yaml", "broken.yaml", "broken.yaml"),
]
