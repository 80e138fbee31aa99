"""One precedence everywhere: explicit argument > config file > default.

:func:`resolve_launch` gives ``nbaccel launch`` its settings; :func:`launcher_defaults` fills
the ``None`` arguments of ``notebook_launcher``; :func:`configured_precision` is what
``Accelerator()`` falls back on after the launcher's choice, and
:func:`configured_accumulation_steps` its ``gradient_accumulation_steps`` when not given;
:func:`configured_fsdp` says whether the file asks for FSDP (which only launched processes use).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..environment import cuda_device_count
from ..plugins import TorchDynamoPlugin
from .deepspeed import DeepSpeedConfig
from .files import LoadedConfig, config_in_force
from .fsdp import FsdpConfig
from .hosts import ray_num_nodes
from .schema import DEFAULT_STALL_TIMEOUT, ConfigFile
from .values import ConfigError, ValueProblem

__all__ = [
    "ResolvedLaunch",
    "configured_accumulation_steps",
    "configured_fsdp",
    "configured_precision",
    "launcher_defaults",
    "resolve_launch",
]

ARGUMENT, FILE, DEFAULT, DERIVED = "argument", "config file", "default", "derived"


@dataclasses.dataclass(frozen=True)
class ResolvedLaunch:
    """What ``nbaccel launch`` runs with.

    Attributes:
        config: every setting, in the file's form (``num_processes`` is the total); this is
            the file the launched processes read.
        processes_per_machine: processes this launcher starts.
        max_restarts: restarts of the group after a failure.
        monitor_interval: seconds between the agent's checks on its processes.
        sources: for each setting, ``argument``, ``config file``, ``default`` or ``derived``.
        path: the config file that was read, if any.
    """

    config: ConfigFile
    processes_per_machine: int
    max_restarts: int = 0
    monitor_interval: float = 0.1
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)
    path: Path | None = None

    @property
    def world_size(self) -> int:
        """Processes over all machines."""
        return self.processes_per_machine * self.config.num_machines

    @property
    def cpu(self) -> bool:
        """True when the processes run on the CPU (asked for, or no GPU on this machine)."""
        config = self.config
        if config.use_cpu or config.distributed_type == "MULTI_CPU":
            return True
        return config.distributed_type != "XLA" and cuda_device_count() == 0


def _pick(name: str, explicit: Mapping[str, Any], loaded: LoadedConfig | None) -> tuple[Any, str]:
    if explicit.get(name) is not None:
        return explicit[name], ARGUMENT
    if loaded is not None and name in loaded.keys:
        return getattr(loaded.config, name), FILE
    return getattr(ConfigFile(), name), DEFAULT


def resolve_launch(explicit: Mapping[str, Any], loaded: LoadedConfig | None) -> ResolvedLaunch:
    """Resolve the launcher's settings (explicit values are not None).

    ``explicit`` uses the file's key names, except that ``num_processes`` is per machine (the
    launcher's meaning), ``fsdp_*`` keys are merged into the file's ``fsdp_config`` and the
    mapping ``deepspeed_config`` into the file's ``deepspeed_config``; ``monitor_interval`` is
    launcher-only (``max_restarts`` is a key of the file too). A ``distributed_type`` given
    (``--use_fsdp``, ``--use_deepspeed``) sets the file's section of the other one aside.

    Raises:
        ConfigError: naming the setting whose value is wrong.
    """
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    skip = {"num_processes", "fsdp_config", "deepspeed_config", "distributed_type"}
    for field in dataclasses.fields(ConfigFile):
        if field.name not in skip:
            values[field.name], sources[field.name] = _pick(field.name, explicit, loaded)
    gpus = cuda_device_count()
    cpu = bool(values["use_cpu"]) or gpus == 0
    per = explicit.get("num_processes")
    sources["num_processes"] = ARGUMENT
    if per is None and loaded is not None and loaded.config.num_processes is not None:
        per, sources["num_processes"] = loaded.config.processes_per_machine, FILE
    if per is None:  # with hosts: one on each (their GPUs are not known here)
        per, sources["num_processes"] = (1 if cpu or _names_hosts(values) else gpus), DEFAULT
    kind, sources["distributed_type"] = _pick("distributed_type", explicit, loaded)
    chosen = str(explicit.get("distributed_type") or "").strip().upper()
    fsdp = _file_section(loaded, "fsdp_config", chosen != "DEEPSPEED")
    fsdp.update({k: v for k, v in explicit.items() if k.startswith("fsdp_") and v is not None})
    sources["fsdp_config"] = ARGUMENT if any(k.startswith("fsdp_") for k in explicit) else FILE
    deepspeed = _deepspeed_section(explicit, loaded, str(kind).strip().upper(), chosen)
    sources["deepspeed_config"] = ARGUMENT if explicit.get("deepspeed_config") else FILE
    source = "launch settings (command line and config file)"
    try:
        values["fsdp_config"] = FsdpConfig(fsdp)
        values["deepspeed_config"] = _deepspeed_config(deepspeed)
        machines = ConfigFile(num_machines=values["num_machines"]).num_machines
        values["num_processes"] = int(per) * machines
        config = ConfigFile(**values, distributed_type=kind)
        if config.distributed_type == "DEEPSPEED":
            _check_deepspeed_file(config)
    except ValueProblem as problem:
        raise problem.error(source) from None
    if config.distributed_type not in ("FSDP", "DEEPSPEED", "XLA"):
        world = config.num_processes or 1
        derived = "NO" if world == 1 else ("MULTI_CPU" if cpu else "MULTI_GPU")
        if derived != config.distributed_type:
            config, sources["distributed_type"] = config.replace(distributed_type=derived), DERIVED
    _check_machines(config, per, cpu, gpus)
    interval = float(explicit.get("monitor_interval") or 0.1)
    if interval <= 0:
        raise ConfigError(
            f"monitor_interval={interval} is not allowed; it must be a positive number of seconds."
        )
    return ResolvedLaunch(
        config=config,
        processes_per_machine=int(per),
        max_restarts=config.max_restarts,
        monitor_interval=interval,
        sources=sources,
        path=loaded.path if loaded is not None else None,
    )


def _file_section(loaded: LoadedConfig | None, name: str, keep: bool) -> dict[str, Any]:
    """The file's ``fsdp_config`` or ``deepspeed_config`` values, unless set aside."""
    if loaded is None or not keep:
        return {}
    return dict(getattr(loaded.config, name).values)


def _deepspeed_section(
    explicit: Mapping[str, Any], loaded: LoadedConfig | None, kind: str, chosen: str
) -> dict[str, Any]:
    """The file's ``deepspeed_config`` with the command line's keys over it; the command line's
    ``gradient_accumulation_steps`` is DeepSpeed's too (as in ``accelerate launch``)."""
    given = {k: v for k, v in (explicit.get("deepspeed_config") or {}).items() if v is not None}
    if given and kind != "DEEPSPEED":
        flags = ", ".join(f"--{key}" for key in sorted(given))
        raise ConfigError(
            f"{flags}: DeepSpeed settings, but distributed_type is {kind}; add "
            "--use_deepspeed (or set distributed_type: DEEPSPEED in the config file), or leave "
            "them out."
        )
    section = _file_section(loaded, "deepspeed_config", chosen != "FSDP")
    section.update(given)
    steps = explicit.get("gradient_accumulation_steps")
    if kind == "DEEPSPEED" and steps is not None:
        section["gradient_accumulation_steps"] = steps
    return section


def _deepspeed_config(section: Mapping[str, Any]) -> DeepSpeedConfig:
    try:
        return DeepSpeedConfig(section)
    except ValueProblem as problem:  # named as in the file: deepspeed_config.zero_stage
        raise problem.at("deepspeed_config") from None


def _check_deepspeed_file(config: ConfigFile) -> None:
    """The DeepSpeed JSON file a DEEPSPEED launch names: checked before anything starts."""
    try:
        config.deepspeed_config.check_config_file()
    except ValueProblem as problem:
        raise problem.at("deepspeed_config") from None


def _names_hosts(values: Mapping[str, Any]) -> bool:
    try:
        return ConfigFile(hosts=values["hosts"]).hosts is not None
    except ValueProblem:  # reported below, with the other settings
        return True


def _check_machines(config: ConfigFile, per: int, cpu: bool, gpus: int) -> None:
    # hosts start every machine from here (num_machines > 1 beside them: hosts: ray's nodes)
    if config.num_machines > 1 and config.main_process_ip is None and config.hosts is None:
        raise ConfigError(
            f"num_machines={config.num_machines}: every machine must know where machine 0 is; "
            "pass --main_process_ip (and --main_process_port unless 29500 suits), or set "
            "main_process_ip in the config file."
        )
    if not cpu and per > gpus and config.hosts is None:  # the hosts' GPUs: checked there
        raise ConfigError(
            f"num_processes={per} per machine but this machine has {gpus} GPU(s); use at most "
            f"{gpus}, or --cpu to run the processes on the CPU."
        )


def _hosts_defaults(
    kwargs: Mapping[str, Any], cfg: ConfigFile, keys: tuple[str, ...]
) -> dict[str, Any]:
    """The file's ``hosts`` for a caller that takes ``hosts=`` and left it ``None`` (with
    ``hosts: ray``, its ``num_machines`` as ``num_nodes``: :func:`ray_num_nodes`), and its
    ``hosts_python``, ``hosts_cwd``, ``hosts_connect_timeout`` wherever hosts are in force."""
    if "hosts" not in kwargs:  # WorkerPool: this machine's ranks only
        return {}
    hosts = cfg.hosts if kwargs["hosts"] is None else kwargs["hosts"]
    if hosts is None or hosts is False:  # False: this machine, whatever the file says
        return {}
    timeout = cfg.hosts_connect_timeout if "hosts_connect_timeout" in keys else None
    from_file = kwargs["hosts"] is None  # the file's num_machines goes with the file's hosts
    return {
        "hosts": cfg.hosts,
        "num_nodes": ray_num_nodes(cfg.hosts, cfg.num_machines) if from_file else None,
        "python": cfg.hosts_python,
        "cwd": cfg.hosts_cwd,
        "connect_timeout": timeout,
    }


def launcher_defaults(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``notebook_launcher``'s arguments with each ``None`` taken from the config in force.

    ``hosts`` (where the caller takes it: not ``WorkerPool``), ``python``, ``cwd`` and
    ``connect_timeout`` come from ``hosts``, ``hosts_python``, ``hosts_cwd`` and
    ``hosts_connect_timeout``; the last three only where hosts are in force. With the file's
    ``hosts: ray``, ``num_nodes`` comes from ``num_machines`` (above 1; 1: every node that fits).

    ``num_processes`` becomes the file's processes per machine; ``use_port`` and
    ``master_addr`` come from ``main_process_port`` / ``main_process_ip`` (a port from the
    file is used as if it had been passed); ``cpu`` and ``debug`` from ``use_cpu`` / ``debug``;
    ``max_restarts``, ``start_method`` and ``on_stall`` from the keys of those names;
    ``stall_timeout`` from its key when the argument was left at its default (the file may
    say ``null``: no watch); ``fsdp_config`` (the file's, for ``distributed_type: FSDP``) and
    ``deepspeed_config`` (the file's, for ``distributed_type: DEEPSPEED``, its JSON file
    checked here) are handed to the workers. With no config file the arguments come back
    unchanged.

    Raises:
        ConfigError: the file is invalid, or names a DeepSpeed JSON file that is not usable.
    """
    loaded = config_in_force()
    out = dict(kwargs)
    if loaded is None:
        return out
    cfg = loaded.config
    fill = {
        "num_processes": cfg.processes_per_machine,
        "mixed_precision": cfg.mixed_precision if "mixed_precision" in loaded.keys else None,
        "use_port": cfg.main_process_port,
        "master_addr": cfg.main_process_ip,
        "cpu": True if cfg.use_cpu else None,
        "debug": True if cfg.debug else None,
        **_hosts_defaults(kwargs, cfg, loaded.keys),
        "max_restarts": cfg.max_restarts if "max_restarts" in loaded.keys else None,
        "start_method": cfg.start_method if "start_method" in loaded.keys else None,
        "fsdp_config": cfg.fsdp_config.to_dict() if cfg.distributed_type == "FSDP" else None,
        "deepspeed_config": _deepspeed_for_launcher(loaded),
        "display_ranks": cfg.display_ranks if "display_ranks" in loaded.keys else None,
        "on_stall": cfg.on_stall if "on_stall" in loaded.keys else None,
    }
    for key, value in fill.items():
        if out.get(key) is None and value is not None:
            out[key] = value
    if out.get("stall_timeout") is DEFAULT_STALL_TIMEOUT and "stall_timeout" in loaded.keys:
        out["stall_timeout"] = cfg.stall_timeout
    return out


def _deepspeed_for_launcher(loaded: LoadedConfig) -> dict[str, Any] | None:
    if loaded.config.distributed_type != "DEEPSPEED":
        return None
    try:
        _check_deepspeed_file(loaded.config)
    except ValueProblem as problem:
        raise problem.error(str(loaded.path)) from None
    return loaded.config.deepspeed_config.to_dict()


def _configured_value(key: str) -> Any:
    """The config file's value for ``key`` when a file in force sets it, else None."""
    loaded = config_in_force()
    if loaded is None or key not in loaded.keys:
        return None
    return getattr(loaded.config, key)


def configured_precision() -> str | None:
    """The config file's ``mixed_precision`` when a file in force sets it, else None."""
    return _configured_value("mixed_precision")


def configured_fsdp() -> Path | None:
    """The config file in force when it says ``distributed_type: FSDP``, else None."""
    loaded = config_in_force()
    if loaded is None or loaded.config.distributed_type != "FSDP":
        return None
    return loaded.path


def configured_accumulation_steps() -> int | None:
    """The config file's ``gradient_accumulation_steps`` when a file in force sets it."""
    return _configured_value("gradient_accumulation_steps")


def configured_dynamo_plugin() -> TorchDynamoPlugin | None:
    """A ``TorchDynamoPlugin`` from the file's ``dynamo_config`` when it names a backend."""
    loaded = config_in_force()
    if loaded is None:
        return None
    dynamo = loaded.config.dynamo_config
    backend = dynamo.get("dynamo_backend")
    if backend is None or str(backend).upper() == "NO":
        return None
    return TorchDynamoPlugin(
        backend=backend,
        mode=dynamo.get("dynamo_mode", "default"),
        fullgraph=bool(dynamo.get("dynamo_use_fullgraph", False)),
        dynamic=dynamo.get("dynamo_use_dynamic"),
    )
