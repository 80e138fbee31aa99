"""The config panel's values without widgets: validation, and conversion to and from the file."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..config import ConfigFile, FsdpConfig, ValueProblem
from ..config.deepspeed import DeepSpeedConfig
from ..config.fsdp import SHARDING_STRATEGIES, STATE_DICT_TYPES, WRAP_POLICIES
from ..config.hosts import check_no_machines, hosts_setting, hosts_text, is_ray, ray_num_nodes
from ..config.ranks import parse_display_ranks
from ..config.schema import START_METHODS
from .deepspeed_form import deepspeed_problems, plugin_arguments, sharding_of
from .hardware import Hardware

__all__ = ["START_METHODS", "PanelValues", "launch_options", "validate"]


@dataclasses.dataclass
class PanelValues:
    """Every field of the config panel, as plain values (``num_processes`` is per machine)."""

    device: str = "cpu"
    num_processes: int = 1
    num_machines: int = 1
    machine_rank: int = 0
    main_process_ip: str = ""
    main_process_port: int = 0  # 0: a free port (one machine only)
    hosts: str = ""  # "node1, node2", "slurm" or "ray": machines started from here; "": none
    hosts_python: str = ""  # "": this kernel's interpreter path
    hosts_cwd: str = ""  # "": this kernel's working directory
    mixed_precision: str = "no"
    start_method: str = "auto"
    gradient_accumulation_steps: int = 1
    max_restarts: int = 0
    display_ranks: str = "0"  # "0", "0,1" or "all"
    use_fsdp: bool = False
    fsdp_version: int = 2
    fsdp_sharding_strategy: str = "FULL_SHARD"
    fsdp_reshard_after_forward: bool = True
    fsdp_auto_wrap_policy: str = "TRANSFORMER_BASED_WRAP"
    fsdp_transformer_layer_cls_to_wrap: str = ""
    fsdp_min_num_params: int = 100_000_000
    fsdp_offload_params: bool = False
    fsdp_state_dict_type: str = "SHARDED_STATE_DICT"
    fsdp_activation_checkpointing: bool = False
    use_deepspeed: bool = False
    deepspeed_zero_stage: int = 2
    deepspeed_offload_optimizer_device: str = "none"
    deepspeed_offload_optimizer_nvme_path: str = ""
    deepspeed_offload_param_device: str = "none"  # stage 3 only
    deepspeed_offload_param_nvme_path: str = ""
    deepspeed_config_file: str = ""  # a DeepSpeed JSON config; "": the plugin writes one
    deepspeed_zero3_save_16bit_model: bool = False

    @property
    def sharding(self) -> str:
        """The Sharding choice: ``none``, ``fsdp`` or ``deepspeed``."""
        return sharding_of(self)

    def deepspeed_arguments(self) -> dict[str, Any]:
        """``DeepSpeedPlugin`` keyword arguments (empty without DeepSpeed)."""
        return plugin_arguments(self)

    def deepspeed_mapping(self) -> dict[str, Any]:
        """The ``deepspeed_config`` mapping these values stand for (empty without DeepSpeed):
        the plugin's arguments under the file's keys."""
        arguments = plugin_arguments(self)
        if "hf_ds_config" in arguments:
            return {"deepspeed_config_file": arguments["hf_ds_config"]}
        return arguments

    def fsdp_mapping(self) -> dict[str, Any]:
        """The ``fsdp_config`` mapping these values stand for (empty without FSDP)."""
        if not self.use_fsdp:
            return {}
        out: dict[str, Any] = {"fsdp_version": self.fsdp_version}
        if self.fsdp_version == 1:
            out["fsdp_sharding_strategy"] = self.fsdp_sharding_strategy
        else:
            out["fsdp_reshard_after_forward"] = self.fsdp_reshard_after_forward
        out["fsdp_auto_wrap_policy"] = self.fsdp_auto_wrap_policy
        if self.fsdp_auto_wrap_policy == "TRANSFORMER_BASED_WRAP":
            out["fsdp_transformer_layer_cls_to_wrap"] = self.fsdp_transformer_layer_cls_to_wrap
        elif self.fsdp_auto_wrap_policy == "SIZE_BASED_WRAP":
            out["fsdp_min_num_params"] = self.fsdp_min_num_params
        out["fsdp_offload_params"] = self.fsdp_offload_params
        out["fsdp_state_dict_type"] = self.fsdp_state_dict_type
        out["fsdp_activation_checkpointing"] = self.fsdp_activation_checkpointing
        return out

    def distributed_type(self) -> str:
        """``distributed_type`` as the file writes it."""
        if self.device == "tpu":
            return "XLA"
        if self.use_fsdp:
            return "FSDP"
        if self.use_deepspeed:
            return "DEEPSPEED"
        hosts = self.host_list()
        machines = len(hosts) if isinstance(hosts, list) else self.num_machines
        if self.num_processes * machines == 1:
            return "NO"
        return "MULTI_GPU" if self.device == "gpu" else "MULTI_CPU"

    def to_config(self) -> ConfigFile:
        """The config file these values stand for.

        Raises:
            ValueProblem: naming the key whose value is wrong (see :func:`validate` first).
        """
        return ConfigFile(
            distributed_type=self.distributed_type(),
            mixed_precision=self.mixed_precision,
            use_cpu=self.device == "cpu",
            num_processes=self.num_processes * self.num_machines,
            num_machines=self.num_machines,
            machine_rank=self.machine_rank,
            main_process_ip=self.main_process_ip.strip() or None,
            main_process_port=self.main_process_port or None,
            gpu_ids="all" if self.device == "gpu" else None,
            fsdp_config=FsdpConfig(self.fsdp_mapping()),
            deepspeed_config=DeepSpeedConfig(self.deepspeed_mapping()),
            gradient_accumulation_steps=self.gradient_accumulation_steps,
            start_method=self.start_method,
            max_restarts=self.max_restarts,
            display_ranks=self.display_ranks,
            hosts=self.hosts,
            hosts_python=self.hosts_python.strip() or None,
            hosts_cwd=self.hosts_cwd.strip() or None,
        )

    def host_list(self) -> list[str] | str | None:
        """The hosts as ``notebook_launcher(hosts=)`` takes them (None: none, or not valid)."""
        try:
            return hosts_setting(self.hosts)
        except (TypeError, ValueError):  # shown next to the field by validate()
            return None

    @classmethod
    def from_config(cls, config: ConfigFile, hardware: Hardware) -> PanelValues:
        """The panel's values for ``config``."""
        if config.distributed_type == "XLA":
            device = "tpu"
        elif not config.use_cpu and hardware.gpus and config.distributed_type != "MULTI_CPU":
            device = "gpu"
        else:
            device = "cpu"
        values = cls(
            device=device,
            num_processes=config.processes_per_machine or 1,
            num_machines=config.num_machines,
            machine_rank=config.machine_rank,
            main_process_ip=config.main_process_ip or "",
            main_process_port=config.main_process_port or 0,
            mixed_precision=config.mixed_precision,
            start_method=config.start_method,
            gradient_accumulation_steps=config.gradient_accumulation_steps,
            max_restarts=config.max_restarts,
            display_ranks=config.display_ranks,
            hosts=hosts_text(config.hosts),
            hosts_python=config.hosts_python or "",
            hosts_cwd=config.hosts_cwd or "",
        )
        fsdp = dict(config.fsdp_config.values)
        if config.distributed_type == "FSDP" or fsdp:
            values.use_fsdp = True
            names = {f.name for f in dataclasses.fields(cls)}
            for key, value in fsdp.items():
                if key == "fsdp_reshard_after_forward" and isinstance(value, str):
                    values.fsdp_sharding_strategy = value  # version 1 spelling
                elif key == "fsdp_transformer_layer_cls_to_wrap":
                    values.fsdp_transformer_layer_cls_to_wrap = str(value)
                elif key in names:
                    setattr(values, key, value)
            if "fsdp_version" not in fsdp:
                values.fsdp_version = 1
        if config.distributed_type == "DEEPSPEED":
            values.use_deepspeed = True
            names = {f.name for f in dataclasses.fields(cls)}
            for key, value in config.deepspeed_config.values.items():
                name = key if key.startswith("deepspeed_") else f"deepspeed_{key}"
                if name in names:  # the keys the panel has no field for stay out of the form
                    setattr(values, name, value)
        return values


def _machine_problems(v: PanelValues) -> dict[str, str]:
    out: dict[str, str] = {}
    if v.num_machines < 1:
        out["num_machines"] = "at least 1 machine"
    elif not 0 <= v.machine_rank < v.num_machines:
        out["machine_rank"] = (
            f"must be between 0 and {v.num_machines - 1} with {v.num_machines} machine(s)"
        )
    if v.num_machines > 1 and not is_ray(v.host_list()):  # with ray: the cluster's nodes
        if not v.main_process_ip.strip():
            out["main_process_ip"] = "give the address of machine 0 when several machines run"
        if not v.main_process_port:
            out["main_process_port"] = "give a port: every machine must use the same one"
    if v.main_process_port and not 1 <= v.main_process_port <= 65535:
        out["main_process_port"] = "a port is between 1 and 65535 (0: a free port)"
    return out


def _hosts_problems(v: PanelValues) -> dict[str, str]:
    try:
        hosts = hosts_setting(v.hosts)
    except (TypeError, ValueError) as exc:
        return {"hosts": str(exc)}
    if hosts is None:
        return {}
    if is_ray(hosts):  # Machines: how many of the cluster's nodes (1: every one that fits)
        if v.machine_rank == 0:
            return {}
        return {"machine_rank": "leave it at 0: with Hosts ray this notebook starts every node"}
    try:
        check_no_machines(
            v.num_machines, v.machine_rank, ("Machines", "Machine rank"), "clear Hosts"
        )
    except ValueError as exc:
        return {"hosts": str(exc)}
    return {}


def _fsdp_problems(v: PanelValues, hardware: Hardware) -> dict[str, str]:
    out: dict[str, str] = {}
    if not v.use_fsdp:
        return out
    if v.device == "tpu":
        out["use_fsdp"] = "FSDP here runs on CPUs or GPUs; on a TPU use the XLA path"
    elif v.num_processes * v.num_machines < 2:
        out["use_fsdp"] = "FSDP shards over processes: use 2 or more processes"
    if v.fsdp_version == 1 and v.fsdp_sharding_strategy not in SHARDING_STRATEGIES:
        out["fsdp_sharding_strategy"] = f"one of {', '.join(SHARDING_STRATEGIES)}"
    if v.fsdp_auto_wrap_policy not in WRAP_POLICIES:
        out["fsdp_auto_wrap_policy"] = f"one of {', '.join(WRAP_POLICIES)}"
    policy = v.fsdp_auto_wrap_policy
    if policy == "TRANSFORMER_BASED_WRAP" and not v.fsdp_transformer_layer_cls_to_wrap.strip():
        out["fsdp_transformer_layer_cls_to_wrap"] = (
            "give at least one layer class name, e.g. BertLayer (or pick another wrap policy)"
        )
    if policy == "SIZE_BASED_WRAP" and v.fsdp_min_num_params < 1:
        out["fsdp_min_num_params"] = "give the minimum number of parameters of a wrapped module"
    if v.fsdp_offload_params and v.device != "gpu":
        out["fsdp_offload_params"] = "CPU offload moves parameters off a GPU: it needs a GPU"
    if v.fsdp_version == 2 and v.fsdp_state_dict_type == "LOCAL_STATE_DICT":
        out["fsdp_state_dict_type"] = "FSDP 2 saves FULL_STATE_DICT or SHARDED_STATE_DICT"
    elif v.fsdp_state_dict_type not in STATE_DICT_TYPES:
        out["fsdp_state_dict_type"] = f"one of {', '.join(STATE_DICT_TYPES)}"
    return out


def _display_problems(v: PanelValues) -> dict[str, str]:
    try:
        ranks = parse_display_ranks(v.display_ranks)
    except ValueProblem:
        return {"display_ranks": "a rank, ranks such as 0,1, or all"}
    hosts = v.host_list()
    nodes = ray_num_nodes(hosts, v.num_machines)
    if hosts == "slurm" or (is_ray(hosts) and nodes is None):  # counted when the launch starts
        return {}
    world = v.num_processes * (len(hosts) if isinstance(hosts, list) else v.num_machines)
    if ranks and ranks[-1] >= world:
        return {"display_ranks": f"ranks 0..{world - 1} exist with {world} process(es)"}
    return {}


def validate(values: PanelValues, hardware: Hardware) -> dict[str, str]:
    """Every problem with ``values`` on ``hardware``: field name -> message (empty: valid)."""
    v = values
    out: dict[str, str] = {}
    if v.device not in hardware.kinds:
        out["device"] = f"this machine has no {v.device.upper()}; use {', '.join(hardware.kinds)}"
    limit = hardware.max_processes(v.device)
    if v.num_processes < 1:
        out["num_processes"] = "at least 1 process"
    elif v.device in hardware.kinds and v.num_processes > limit and not v.host_list():
        out["num_processes"] = f"at most {limit}: this machine has {hardware.limit_text(v.device)}"
    precision = hardware.precision_problem(v.device, v.mixed_precision)
    if precision is not None:
        out["mixed_precision"] = precision
    if v.start_method not in START_METHODS:
        out["start_method"] = f"one of {', '.join(START_METHODS)}"
    if v.gradient_accumulation_steps < 1:
        out["gradient_accumulation_steps"] = "at least 1 (1: no accumulation)"
    if v.max_restarts < 0:
        out["max_restarts"] = "0 or more"
    out.update(_display_problems(v))
    out.update(_machine_problems(v))
    out.update(_hosts_problems(v))
    out.update(_fsdp_problems(v, hardware))
    out.update(deepspeed_problems(v))
    if not out:
        try:  # the rest of the settings, as the file would hold them (DeepSpeed aside)
            dataclasses.replace(v, use_deepspeed=False).to_config()
        except ValueProblem as problem:
            key = (problem.key or "device").split(".")[-1]
            out[key if hasattr(v, key) else "device"] = problem.problem
    return out


def launch_options(values: PanelValues) -> dict[str, Any]:
    """``notebook_launcher`` keyword arguments for ``values`` (defaults left out)."""
    v = values
    out: dict[str, Any] = {"num_processes": v.num_processes}
    if v.mixed_precision != "no":
        out["mixed_precision"] = v.mixed_precision
    hosts = v.host_list()
    if is_ray(hosts):
        nodes = ray_num_nodes(hosts, v.num_machines)
        if nodes is not None:  # None: every node of the cluster that fits
            out["num_nodes"] = nodes
    elif v.num_machines > 1:
        out["num_nodes"] = v.num_machines
        out["node_rank"] = v.machine_rank
    if v.main_process_ip.strip():
        out["master_addr"] = v.main_process_ip.strip()
    if v.main_process_port:
        out["use_port"] = v.main_process_port
    if v.max_restarts:
        out["max_restarts"] = v.max_restarts
    if v.start_method != "auto":
        out["start_method"] = v.start_method
    try:
        ranks = parse_display_ranks(v.display_ranks)
    except ValueProblem:  # shown next to the field by validate(); the call keeps its default
        ranks = (0,)
    if ranks != (0,):
        out["display_ranks"] = "all" if ranks is None else list(ranks)
    if v.device == "cpu":
        out["cpu"] = True
    if hosts is not None:
        out["hosts"] = hosts
        if v.hosts_python.strip():
            out["python"] = v.hosts_python.strip()
        if v.hosts_cwd.strip():
            out["cwd"] = v.hosts_cwd.strip()
    return out
