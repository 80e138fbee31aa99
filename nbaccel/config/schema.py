"""The config file's schema: every key Accelerate's file has, validated on construction.

:class:`ConfigFile` holds the keys nbaccel understands (each documented in ``docs/cli.md``).
Keys that Accelerate writes but nbaccel does not act on (``megatron_lm_config`` ...) are
accepted and reported, and so is a ``deepspeed_config`` section of a file whose
``distributed_type`` is not ``DEEPSPEED``; a key neither knows is an error that names the key
meant.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Literal, get_args

from ..enums import PRECISIONS, DynamoBackend
from .deepspeed import DeepSpeedConfig, as_deepspeed_config, check_one_sharding, ignored_keys
from .fsdp import FsdpConfig
from .hosts import (
    DEFAULT_CONNECT_TIMEOUT,
    as_key,
    check_connect_timeout,
    check_file_hosts,
    check_path_text,
    hosts_setting,
)
from .ranks import DEFAULT_DISPLAY_RANKS, display_ranks_text
from .values import (
    DefaultSeconds,
    ValueProblem,
    as_bool,
    as_choice,
    as_int,
    as_mapping,
    as_port,
    as_seconds_or_none,
    as_str,
)

__all__ = [
    "DEFAULT_STALL_TIMEOUT",
    "DISTRIBUTED_TYPES",
    "DYNAMO_KEYS",
    "IGNORED_KEYS",
    "NBACCEL_KEYS",
    "ON_STALL",
    "PRECISIONS",
    "START_METHODS",
    "ConfigFile",
    "field_help",
    "parse_mapping",
]

DISTRIBUTED_TYPES = ("NO", "MULTI_CPU", "MULTI_GPU", "FSDP", "DEEPSPEED", "XLA")
_UNSUPPORTED_TYPES = (
    "MEGATRON_LM",
    "MULTI_XPU",
    "MULTI_NPU",
    "MULTI_MLU",
    "MULTI_SDAA",
    "MULTI_MUSA",
    "MULTI_HPU",
)
RDZV_BACKENDS = ("static", "c10d")
StartMethodSetting = Literal["auto", "fork", "spawn"]  # "auto": fork where that is safe
OnStall = Literal["warn", "raise"]
START_METHODS: tuple[StartMethodSetting, ...] = get_args(StartMethodSetting)
ON_STALL: tuple[OnStall, ...] = get_args(OnStall)
# Seconds a rank may wait in one collective before the launcher reports a stall: far above a
# healthy step's longest wait (a peer's slow first batch, a checkpoint written by one rank
# while the others wait at the barrier after it), far below a backend's own timeout (30 min).
DEFAULT_STALL_TIMEOUT = DefaultSeconds(300.0)
# nbaccel's own keys (Accelerate's files have none of them): written only when not default,
# so that a file nbaccel writes with its defaults stays one Accelerate reads too.
NBACCEL_KEYS = {
    "gradient_accumulation_steps": 1,
    "hosts": None,
    "hosts_python": None,
    "hosts_cwd": None,
    "hosts_connect_timeout": DEFAULT_CONNECT_TIMEOUT,
    "start_method": "auto",
    "max_restarts": 0,
    "display_ranks": DEFAULT_DISPLAY_RANKS,
    "stall_timeout": float(DEFAULT_STALL_TIMEOUT),
    "on_stall": "warn",
}
# Keys of Accelerate's files that nbaccel accepts and does not act on.
IGNORED_KEYS = (
    "megatron_lm_config",
    "ipex_config",
    "mpirun_config",
    "fp8_config",
    "parallelism_config",
    "enable_cpu_affinity",
    "use_mps_device",
    "commands",
    "command_file",
    "dynamo_backend",
    "ec2_instance_type",
    "iam_role_name",
    "image_uri",
    "profile",
    "region",
    "base_job_name",
    "pytorch_version",
    "transformers_version",
    "py_version",
    "sagemaker_inputs_file",
    "sagemaker_metrics_file",
    "additional_args",
)
DYNAMO_KEYS: dict[str, Callable[[Any], Any]] = {
    "dynamo_backend": lambda v: str(DynamoBackend.parse(v, "dynamo_backend")),
    "dynamo_mode": lambda v: as_choice(
        v, ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
    ),
    "dynamo_use_fullgraph": as_bool,
    "dynamo_use_dynamic": as_bool,
    "dynamo_use_regional_compilation": as_bool,
}


def _distributed_type(value: Any) -> str:
    text = str(value).strip().upper()
    if text == "TPU":
        return "XLA"
    if text in _UNSUPPORTED_TYPES:
        raise ValueProblem(
            f"asks for {text}, which nbaccel does not support; use one of "
            f"{', '.join(DISTRIBUTED_TYPES)} (FSDP or DEEPSPEED for sharded training)"
        )
    return as_choice(text, DISTRIBUTED_TYPES)


def _compute_environment(value: Any) -> str:
    if str(value).strip().upper() == "AMAZON_SAGEMAKER":
        raise ValueProblem("asks for AMAZON_SAGEMAKER, which nbaccel does not support")
    return as_choice(value, ("LOCAL_MACHINE",))


def _processes(value: Any) -> int | None:
    if value is None or value == -1 or value == "-1":
        return None
    return as_int(value, minimum=1)


def _optional(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None or value == "" else parse(value)


def _gpu_ids(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    text = str(value).replace(" ", "")
    if text.lower() == "all":
        return "all"
    if not all(part.isdigit() for part in text.split(",")):
        raise ValueProblem(f"has the value {value!r}; use 'all' or GPU indexes like '0,1'")
    return text


def _str_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)):
        raise ValueProblem(f"has the value {value!r}, which is not a list")
    return [as_str(v) for v in value]


def _fsdp(value: Any) -> FsdpConfig:
    if isinstance(value, FsdpConfig):
        return value
    return FsdpConfig(as_mapping(value))


def _dynamo(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    out = {}
    for key, raw in as_mapping(value).items():
        if key not in DYNAMO_KEYS:
            raise ValueProblem("is not a dynamo_config key", key=key, known=tuple(DYNAMO_KEYS))
        try:
            out[key] = DYNAMO_KEYS[key](raw)
        except ValueError as exc:
            raise ValueProblem(f"has a bad value: {exc}", key=key) from None
    return out


def _meta(parse: Callable[[Any], Any], text: str) -> dict[str, Any]:
    return {"parse": parse, "help": text}


def _f(default: Any, parse: Callable[[Any], Any], text: str) -> Any:
    return dataclasses.field(default=default, metadata=_meta(parse, text))


@dataclasses.dataclass(frozen=True)
class ConfigFile:
    """One config file's settings; every value is checked (and normalised) on construction.

    Raises:
        ValueProblem: naming the key whose value is wrong.
    """

    compute_environment: str = _f("LOCAL_MACHINE", _compute_environment, "LOCAL_MACHINE")
    distributed_type: str = _f(
        "NO", _distributed_type, "NO, MULTI_CPU, MULTI_GPU, FSDP, DEEPSPEED or XLA (TPU)"
    )
    mixed_precision: str = _f(
        "no", lambda v: as_choice(str(v), PRECISIONS), "no, fp16, bf16 or fp8"
    )
    use_cpu: bool = _f(False, as_bool, "run on the CPU even when GPUs are present")
    debug: bool = _f(False, as_bool, "turn on the launcher's debug checks")
    num_processes: int | None = _f(
        None, _processes, "processes over ALL machines (the launch flag is per machine)"
    )
    num_machines: int = _f(
        1, lambda v: as_int(v, minimum=1), "machines taking part (Ray nodes with hosts: ray)"
    )
    machine_rank: int = _f(0, lambda v: as_int(v, minimum=0), "index of this machine")
    main_process_ip: str | None = _f(
        None, _optional(as_str), "address of machine 0 (default 127.0.0.1 on one machine)"
    )
    main_process_port: int | None = _f(
        None, _optional(as_port), "rendezvous port (default: a free port on one machine)"
    )
    rdzv_backend: str = _f("static", lambda v: as_choice(str(v), RDZV_BACKENDS), "static or c10d")
    same_network: bool = _f(True, as_bool, "all machines on one local network")
    gpu_ids: str | None = _f(None, _gpu_ids, "'all' or GPU indexes like '0,1'")
    main_training_function: str = _f(
        "main", as_str, "function called when the script has no `if __name__ == '__main__'`"
    )
    downcast_bf16: bool = _f(False, as_bool, "TPU: store float32 as bfloat16 (with bf16)")
    fsdp_config: FsdpConfig = dataclasses.field(
        default_factory=FsdpConfig, metadata=_meta(_fsdp, "FSDP settings (see to-fsdp2)")
    )
    deepspeed_config: DeepSpeedConfig = dataclasses.field(
        default_factory=DeepSpeedConfig,
        metadata=_meta(as_deepspeed_config, "DeepSpeed settings (with distributed_type DEEPSPEED)"),
    )
    dynamo_config: dict[str, Any] = dataclasses.field(
        default_factory=dict, metadata=_meta(_dynamo, "torch.compile settings")
    )
    tpu_env: list[str] = dataclasses.field(
        default_factory=list, metadata=_meta(_str_list, "TPU: variables for the pod's processes")
    )
    tpu_use_cluster: bool = _f(False, as_bool, "TPU: the TPU is a pod (cluster)")
    tpu_use_sudo: bool = _f(False, as_bool, "TPU: run pod commands with sudo")
    tpu_name: str | None = _f(None, _optional(as_str), "TPU: name of the TPU")
    tpu_zone: str | None = _f(None, _optional(as_str), "TPU: zone of the TPU")
    tpu_vm: list[str] = dataclasses.field(
        default_factory=list, metadata=_meta(_str_list, "TPU: names of the TPU VMs")
    )
    gradient_accumulation_steps: int = _f(
        1,
        lambda v: as_int(v, minimum=1),
        "batches per optimizer step: Accelerator()'s default (1: no accumulation); "
        "DeepSpeed's too in a DEEPSPEED launch",
    )
    hosts: list[str] | str | None = dataclasses.field(
        default=None,
        metadata=_meta(
            as_key(hosts_setting),
            "machines notebook_launcher and nbaccel launch start from here over ssh, "
            "num_processes on each: node1,node2 (user@host:port), slurm (the allocation's "
            "nodes) or ray (a Ray cluster's nodes; num_machines of them, 1: all that fit)",
        ),
    )
    hosts_python: str | None = _f(
        None,
        _optional(as_key(check_path_text, "hosts_python")),
        "with hosts: the Python interpreter on every host (default: this one's path)",
    )
    hosts_cwd: str | None = _f(
        None,
        _optional(as_key(check_path_text, "hosts_cwd")),
        "with hosts: the ranks' working directory on every host (default: this one)",
    )
    hosts_connect_timeout: float = _f(
        DEFAULT_CONNECT_TIMEOUT,
        as_key(check_connect_timeout, "hosts_connect_timeout", number=True),
        "with hosts: seconds ssh may take to reach a host",
    )
    start_method: str = _f(
        "auto",
        lambda v: as_choice(str(v), START_METHODS),
        "how notebook_launcher starts its processes: auto, fork or spawn",
    )
    max_restarts: int = _f(
        0, lambda v: as_int(v, minimum=0), "restarts of the group after a failure (0: none)"
    )
    display_ranks: str = _f(
        DEFAULT_DISPLAY_RANKS,
        display_ranks_text,
        "ranks whose rich output (display(), notebook bars) notebook_launcher shows: 0,1 or all",
    )

    stall_timeout: float | None = _f(
        float(DEFAULT_STALL_TIMEOUT),
        as_seconds_or_none,
        "seconds a rank may wait in one collective before the launcher reports a stall "
        "(null: no watch)",
    )
    on_stall: str = _f(
        "warn",
        lambda v: as_choice(str(v), ON_STALL),
        "what a stall does: warn (the table in the cell, the run goes on) or raise",
    )

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            try:
                value = field.metadata["parse"](getattr(self, field.name))
            except ValueProblem as problem:
                raise problem.at(field.name) from None
            object.__setattr__(self, field.name, value)
        if self.machine_rank >= self.num_machines:
            raise ValueProblem(
                f"is {self.machine_rank}, but num_machines is {self.num_machines} "
                f"(ranks 0..{self.num_machines - 1})",
                key="machine_rank",
            )
        if self.num_processes is not None and self.num_processes % self.num_machines:
            raise ValueProblem(
                f"is {self.num_processes}, which does not divide among {self.num_machines} "
                "machines (num_processes in a file is the total over all machines)",
                key="num_processes",
            )
        if self.hosts is not None:
            check_file_hosts(self.hosts, self.num_machines, self.machine_rank)
        check_one_sharding(self.distributed_type, self.fsdp_config.values, self.deepspeed_config)

    @property
    def processes_per_machine(self) -> int | None:
        """``num_processes`` divided among the machines, or None when not set."""
        if self.num_processes is None:
            return None
        return self.num_processes // self.num_machines

    def replace(self, **changes: Any) -> ConfigFile:
        """A validated copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The settings as written to a YAML file (Accelerate's key names; nbaccel's own keys,
        :data:`NBACCEL_KEYS`, only when they differ from their defaults)."""
        out: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name in NBACCEL_KEYS and value == NBACCEL_KEYS[field.name]:
                continue  # an nbaccel-only key at its default is left out
            if isinstance(value, (FsdpConfig, DeepSpeedConfig)):
                if isinstance(value, DeepSpeedConfig) and not value.values:
                    continue  # written when it says something (Accelerate reads it absent)
                value = value.to_dict()
            out[field.name] = value
        return out


def field_help() -> dict[str, str]:
    """Each key of :class:`ConfigFile` with its one-line meaning."""
    return {f.name: f.metadata["help"] for f in dataclasses.fields(ConfigFile)}


def parse_mapping(data: Any) -> tuple[ConfigFile, list[str]]:
    """Build a :class:`ConfigFile` from a loaded file; also return the ignored keys present.

    Raises:
        ValueProblem: naming the key (unknown keys carry the known ones for a suggestion).
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ValueProblem("the file is not a mapping of keys to values", key="<top level>")
    known = [f.name for f in dataclasses.fields(ConfigFile)]
    kwargs: dict[str, Any] = {}
    ignored: list[str] = []
    for key, value in data.items():
        key = str(key)
        if key in known:
            kwargs[key] = value
            if key == "deepspeed_config":
                ignored.append(key)  # provisional: kept, or its own ignored keys (below)
        elif key in IGNORED_KEYS:
            if value not in (None, {}, [], False, "", "NO", "no"):
                ignored.append(key)
        else:
            raise ValueProblem(
                "is not a key of nbaccel or Accelerate config files",
                key=key,
                known=(*known, *IGNORED_KEYS),
            )
    config = ConfigFile(**kwargs)
    return config, ignored_keys(ignored, config.distributed_type, config.deepspeed_config)
