"""Kwargs handlers: small dataclasses that carry extra arguments to torch objects."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from .ddp_hooks import register_comm_hook
from .enums import DDPCommunicationHookType
from .validation import check_bool, check_number, is_number

__all__ = [
    "AutocastKwargs",
    "DistributedDataParallelKwargs",
    "GradScalerKwargs",
    "InitProcessGroupKwargs",
    "KwargsHandler",
]

_BACKENDS = ("gloo", "nccl", "mpi", "ucc", "xccl", "hccl", "xla")


@dataclasses.dataclass
class KwargsHandler:
    """Base class: :meth:`to_kwargs` returns only the fields changed from their defaults."""

    def to_dict(self) -> dict[str, Any]:
        """Every field, as a dict."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_kwargs(self) -> dict[str, Any]:
        """The fields whose value differs from the default, ready to pass as ``**kwargs``."""
        default = type(self)().to_dict()
        return {k: v for k, v in self.to_dict().items() if default[k] != v}


def _check_backend(backend: str) -> None:
    parts = [p.split(":")[-1] for p in backend.split(",")] if backend else []
    unknown = [p for p in parts if p not in _BACKENDS]
    if not parts or unknown:
        raise ValueError(
            f"InitProcessGroupKwargs(backend={backend!r}) is not a known backend; use one of "
            f"{list(_BACKENDS)} (or a 'cpu:gloo,cuda:nccl' style mapping)."
        )


@dataclasses.dataclass
class InitProcessGroupKwargs(KwargsHandler):
    """Arguments for ``torch.distributed.init_process_group``.

    Args:
        backend: process-group backend; None lets nbaccel pick (gloo on CPU, nccl on GPU).
        init_method: rendezvous URL; None uses the launcher's ``env://`` variables.
        timeout: how long collectives wait; a ``timedelta`` or a number of seconds.
    """

    backend: str | None = None
    init_method: str | None = None
    timeout: timedelta | None = None

    def __post_init__(self) -> None:
        if self.backend is not None:
            if not isinstance(self.backend, str):
                raise TypeError(
                    f"InitProcessGroupKwargs(backend=...) must be a string, "
                    f"got {type(self.backend).__name__}."
                )
            _check_backend(self.backend)
        if self.init_method is not None and not isinstance(self.init_method, str):
            raise TypeError("InitProcessGroupKwargs(init_method=...) must be a URL string.")
        if self.timeout is not None:
            if not (is_number(self.timeout) or isinstance(self.timeout, timedelta)):
                raise TypeError(
                    "InitProcessGroupKwargs(timeout=...) must be a datetime.timedelta or a "
                    f"number of seconds, got {type(self.timeout).__name__}."
                )
            if not isinstance(self.timeout, timedelta):
                self.timeout = timedelta(seconds=float(self.timeout))
            if self.timeout.total_seconds() <= 0:
                raise ValueError(
                    f"InitProcessGroupKwargs(timeout={self.timeout}) must be positive."
                )


@dataclasses.dataclass
class DistributedDataParallelKwargs(KwargsHandler):
    """Arguments for ``torch.nn.parallel.DistributedDataParallel`` (see its documentation)."""

    dim: int = 0
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    check_reduction: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    comm_hook: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_wrapper: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_state_option: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.comm_hook = DDPCommunicationHookType(
            DDPCommunicationHookType.parse(self.comm_hook, "comm_hook")
        )
        self.comm_wrapper = DDPCommunicationHookType(
            DDPCommunicationHookType.parse(self.comm_wrapper, "comm_wrapper")
        )
        if self.comm_wrapper not in ("no", "fp16", "bf16"):
            raise ValueError(
                f"DistributedDataParallelKwargs(comm_wrapper={str(self.comm_wrapper)!r}): a "
                "wrapper compresses another hook; use 'fp16' or 'bf16'."
            )
        check_number("DistributedDataParallelKwargs(dim)", self.dim)
        check_number("DistributedDataParallelKwargs(bucket_cap_mb)", self.bucket_cap_mb)
        for name in (
            "broadcast_buffers",
            "find_unused_parameters",
            "check_reduction",
            "gradient_as_bucket_view",
            "static_graph",
        ):
            check_bool(f"DistributedDataParallelKwargs({name})", getattr(self, name))
        if self.bucket_cap_mb <= 0:
            raise ValueError(
                f"DistributedDataParallelKwargs(bucket_cap_mb={self.bucket_cap_mb}) must be "
                "positive."
            )

    def to_kwargs(self) -> dict[str, Any]:
        """The changed ``DistributedDataParallel`` arguments (the hook fields are not ones)."""
        kwargs = super().to_kwargs()
        for name in ("comm_hook", "comm_wrapper", "comm_state_option"):
            kwargs.pop(name, None)
        return kwargs

    def register_comm_hook(self, model: Any) -> None:
        """Register ``comm_hook`` (wrapped by ``comm_wrapper``) on a DDP ``model``."""

        register_comm_hook(model, self.comm_hook, self.comm_wrapper, self.comm_state_option)


@dataclasses.dataclass
class GradScalerKwargs(KwargsHandler):
    """Arguments for the fp16 ``torch.amp.GradScaler``."""

    init_scale: float = 65536.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    enabled: bool = True

    def __post_init__(self) -> None:
        for name in ("init_scale", "growth_factor", "backoff_factor", "growth_interval"):
            check_number(f"GradScalerKwargs({name})", getattr(self, name))
        check_bool("GradScalerKwargs(enabled)", self.enabled)
        if self.init_scale <= 0 or self.growth_factor <= 1.0 or not 0 < self.backoff_factor < 1:
            raise ValueError(
                "GradScalerKwargs needs init_scale > 0, growth_factor > 1 and "
                f"0 < backoff_factor < 1; got init_scale={self.init_scale}, "
                f"growth_factor={self.growth_factor}, backoff_factor={self.backoff_factor}."
            )
        if self.growth_interval < 1:
            raise ValueError(
                f"GradScalerKwargs(growth_interval={self.growth_interval}) must be at least 1."
            )


@dataclasses.dataclass
class AutocastKwargs(KwargsHandler):
    """Arguments for ``torch.autocast`` (``enabled``, ``cache_enabled``)."""

    enabled: bool = True
    cache_enabled: bool | None = None

    def __post_init__(self) -> None:
        check_bool("AutocastKwargs(enabled)", self.enabled)
        check_bool("AutocastKwargs(cache_enabled)", self.cache_enabled, allow_none=True)
