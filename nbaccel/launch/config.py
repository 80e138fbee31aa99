"""LaunchConfig: every launcher argument, validated before any process starts."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import warnings
from typing import Any

from ..config.ranks import parse_display_ranks
from ..config.resolve import launcher_defaults
from ..config.schema import (
    DEFAULT_STALL_TIMEOUT,
    ON_STALL,
    START_METHODS,
    OnStall,
    StartMethodSetting,
)
from ..config.values import ValueProblem
from ..enums import PRECISIONS
from ..environment import (
    cuda_device_count,
    debug_mode_requested,
    fp16_fallback_warning,
    precision_in_effect,
    read_malloc_choice,
    xla_available,
)
from ..validation import is_int, is_number
from .hostargs import HostsSettings, check_hosts_settings
from .prefix import validate_prefix_template

__all__ = [
    "DEFAULT_MULTI_NODE_PORT",
    "DEFAULT_STALL_TIMEOUT",
    "LaunchConfig",
    "OnStall",
    "StartMethodSetting",
    "positive_seconds",
]

# The port machines agree on when a multi-node launch names none (torchrun's and Accelerate's).
DEFAULT_MULTI_NODE_PORT = 29500

_RDZV_BACKENDS = ("static", "c10d")


def _int(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r}).")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise ValueError(f"{name}={value} is not allowed; it must be {bound}.")
    return value


def positive_seconds(name: str, value: Any, allow_none: bool = False) -> float | None:
    """``value`` as seconds, checked: a positive int or float (not a bool), or None where
    ``allow_none``; the error names ``name`` and what it accepts."""
    if value is None and allow_none:
        return None
    if not is_number(value):
        allowed = "a positive number of seconds" + (" or None" if allow_none else "")
        raise TypeError(f"{name} must be {allowed}, got {type(value).__name__} ({value!r}).")
    if value <= 0:
        raise ValueError(f"{name}={value} is not allowed; it must be a positive number of seconds.")
    return float(value)


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value.lower() not in allowed:
        raise ValueError(f"{name}={value!r} is not allowed; use one of {list(allowed)}.")
    return value.lower()


def _port(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    return _int(name, value, 1, 65535)


def _endpoint(value: Any) -> tuple[str, int] | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str) or ":" not in value:
        raise ValueError(
            f"rdzv_endpoint={value!r} must look like 'host:port', e.g. '10.0.0.1:29400'."
        )
    host, _, port = value.rpartition(":")
    if not host:
        raise ValueError(f"rdzv_endpoint={value!r} has no host; use 'host:port'.")
    parsed = _port("the port of rdzv_endpoint", port)
    assert parsed is not None
    return host.strip("[]"), parsed


def _display_ranks(value: Any) -> tuple[int, ...] | None:

    try:
        return parse_display_ranks(0 if value is None else value)
    except ValueProblem as problem:
        raise ValueError(f"display_ranks {problem}.") from None


def _check_display_ranks(config: LaunchConfig) -> None:
    ranks = config.display_ranks or ()
    if ranks and ranks[-1] >= config.world_size:
        raise ValueError(
            f"display_ranks={list(ranks)} names rank {ranks[-1]}, but the launch has "
            f"{config.world_size} processes (ranks 0..{config.world_size - 1}); name ranks "
            "that exist, or 'all'."
        )


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """The launcher's settings, checked on construction (see ``notebook_launcher``)."""

    num_processes: int
    mixed_precision: str = "no"
    use_port: int | None = None
    master_addr: str = "127.0.0.1"
    node_rank: int = 0
    num_nodes: int = 1
    rdzv_backend: str = "static"
    rdzv_endpoint: tuple[str, int] | None = None
    rdzv_conf: dict[str, Any] = dataclasses.field(default_factory=dict)
    rdzv_id: str = "none"
    max_restarts: int = 0
    monitor_interval: float = 0.1
    log_line_prefix_template: str | None = None
    start_method: StartMethodSetting = "auto"
    timeout: float | None = None
    rendezvous_timeout: float = 300.0
    node_timeout: float = 60.0
    accelerator: str = "cpu"
    debug: bool = False
    fsdp_config: dict[str, Any] | None = None
    deepspeed_config: dict[str, Any] | None = None  # the config file's deepspeed_config
    display_ranks: tuple[int, ...] | None = (0,)  # None: every rank
    hosts: HostsSettings | None = None  # hosts=[...]: machines this notebook starts over SSH
    stall_timeout: float | None = float(DEFAULT_STALL_TIMEOUT)  # None: no watch over the ranks
    on_stall: OnStall = "warn"

    @property
    def cpu(self) -> bool:
        """True when the workers run on the CPU (gloo)."""
        return self.accelerator == "cpu"

    @property
    def world_size(self) -> int:
        """Processes over all machines."""
        machines = len(self.hosts.targets) if self.hosts is not None else self.num_nodes
        return self.num_processes * machines

    @property
    def multi_node(self) -> bool:
        """True when more than one machine takes part."""
        return self.num_nodes > 1

    @property
    def precision_falls_back(self) -> bool:
        """True when the processes' device does not train in ``mixed_precision`` (fp16 on
        the CPU): they train in full precision, and :meth:`build` warned once, here."""
        return precision_in_effect(self.mixed_precision, self.accelerator) != self.mixed_precision

    @classmethod
    def build(cls, **kwargs: Any) -> LaunchConfig:
        """Validate raw launcher arguments; ``None`` values take the config file's value where
        a file is in force (``nbaccel config``), else their defaults."""

        kwargs = launcher_defaults(kwargs)
        gpus = cuda_device_count()
        cpu = kwargs.pop("cpu", None)
        if cpu is not None and not isinstance(cpu, bool):
            raise TypeError(f"cpu must be True or False, got {cpu!r}.")
        hosts = check_hosts_settings(kwargs, cpu)
        if hosts is not None:  # the hosts' GPUs decide, once their agents have answered
            gpus, cpu = 0, True
        # an XLA request (a TPU, or PJRT_DEVICE) wins over GPUs, as the workers' device does
        accelerator = "cpu" if cpu else "xla" if xla_available() else "cuda" if gpus else "cpu"
        num = kwargs.pop("num_processes", None)
        if num is None:
            num = {"cuda": gpus, "xla": 8}.get(accelerator, 1)
        num = _int("num_processes", num, 1)
        if accelerator == "cuda" and num > gpus:
            raise ValueError(
                f"num_processes={num} but this machine has {gpus} GPU(s); use at most {gpus}, "
                "or pass cpu=True to run the processes on the CPU."
            )
        fsdp_config = kwargs.pop("fsdp_config", None)  # the config file's, validated there
        deepspeed_config = kwargs.pop("deepspeed_config", None)  # likewise
        debug = kwargs.pop("debug", None)
        if debug is not None and not isinstance(debug, bool):
            raise TypeError(f"debug must be True, False or None, got {debug!r}.")
        config = cls(
            num_processes=num,
            accelerator=accelerator,
            debug=debug_mode_requested() if debug is None else debug,
            fsdp_config=fsdp_config,
            deepspeed_config=deepspeed_config,
            hosts=hosts,
            **cls._checked(kwargs),
        )
        _check_display_ranks(config)
        read_malloc_choice()  # a bad NBACCEL_MALLOC_TUNING fails here, before any rank
        if config.precision_falls_back:  # once, in the notebook; the ranks are told not to
            warnings.warn(fp16_fallback_warning(config.accelerator), UserWarning, stacklevel=3)
        return config

    @staticmethod
    def _checked(raw: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        precision = raw.get("mixed_precision") or "no"
        out["mixed_precision"] = _choice("mixed_precision", precision, PRECISIONS)
        out["use_port"] = _port("use_port", raw.get("use_port"))
        addr = raw.get("master_addr") or "127.0.0.1"
        if not isinstance(addr, str) or not addr.strip():
            raise ValueError(f"master_addr={addr!r} must be a host name or IP address.")
        out["master_addr"] = addr.strip()
        nodes = raw.get("num_nodes")
        out["num_nodes"] = _int("num_nodes", 1 if nodes is None else nodes, 1)
        out["node_rank"] = _int("node_rank", raw.get("node_rank", 0), 0, out["num_nodes"] - 1)
        out["rdzv_backend"] = _choice(
            "rdzv_backend", raw.get("rdzv_backend", "static"), _RDZV_BACKENDS
        )
        out["rdzv_endpoint"] = _endpoint(raw.get("rdzv_endpoint"))
        conf = raw.get("rdzv_conf") or {}
        if not isinstance(conf, dict):
            raise TypeError(f"rdzv_conf must be a dict or None, got {type(conf).__name__}.")
        out["rdzv_conf"] = dict(conf)
        rdzv_id = raw.get("rdzv_id", "none")
        if not isinstance(rdzv_id, str) or not rdzv_id:
            raise ValueError(f"rdzv_id={rdzv_id!r} must be a non-empty string.")
        out["rdzv_id"] = rdzv_id
        restarts = raw.get("max_restarts")  # None: the config file's, else 0
        out["max_restarts"] = _int("max_restarts", 0 if restarts is None else restarts, 0)
        out["monitor_interval"] = positive_seconds(
            "monitor_interval", raw.get("monitor_interval", 0.1)
        )
        out["timeout"] = positive_seconds("timeout", raw.get("timeout"), allow_none=True)
        out["stall_timeout"] = positive_seconds(
            "stall_timeout", raw.get("stall_timeout", DEFAULT_STALL_TIMEOUT), allow_none=True
        )
        out["on_stall"] = _choice("on_stall", raw.get("on_stall") or "warn", ON_STALL)
        out["rendezvous_timeout"] = positive_seconds(
            "rendezvous_timeout", raw.get("rendezvous_timeout", 300.0)
        )
        out["node_timeout"] = positive_seconds("node_timeout", raw.get("node_timeout", 60.0))
        out["start_method"] = _choice(
            "start_method", raw.get("start_method") or "auto", START_METHODS
        )
        if out["start_method"] == "fork" and "fork" not in multiprocessing.get_all_start_methods():
            raise ValueError("start_method='fork' is not available on this platform; use 'spawn'.")
        out["display_ranks"] = _display_ranks(raw.get("display_ranks"))
        template = raw.get("log_line_prefix_template")
        if template is not None:
            validate_prefix_template(template)
        out["log_line_prefix_template"] = template
        if out["num_nodes"] > 1 and out["use_port"] is None and out["rdzv_endpoint"] is None:
            out["use_port"] = DEFAULT_MULTI_NODE_PORT  # every machine agrees on it unasked
        if out["rdzv_backend"] == "static" and out["rdzv_endpoint"] and out["use_port"] is None:
            out["master_addr"], out["use_port"] = out["rdzv_endpoint"]
        return out

    def threads_per_process(self, user_threads: int | None) -> int | None:
        """torch threads per worker so that processes don't oversubscribe the cores."""
        if user_threads is not None:
            return user_threads
        if self.cpu:
            return max(1, (os.cpu_count() or 1) // self.num_processes)
        return None
