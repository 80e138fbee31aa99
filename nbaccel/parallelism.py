"""``ParallelismConfig``: the sizes of the data-parallel dimensions and the device mesh built
from them; the tensor/context/sequence parallel handlers, whose use is refused clearly."""

from __future__ import annotations

import dataclasses
from typing import Any, overload

from torch.distributed import device_mesh

from .environment.patching import parallelism_config_defaults
from .unsupported import refuse
from .validation import is_int

__all__ = [
    "DeepSpeedSequenceParallelConfig",
    "ParallelismConfig",
    "TorchContextParallelConfig",
    "TorchTensorParallelConfig",
    "TorchTensorParallelPlugin",
]

_MESH_ORDER = ("dp_replicate", "dp_shard", "cp", "sp", "tp")


@dataclasses.dataclass
class TorchTensorParallelConfig:
    """Options of torch's tensor parallelism (accepted; nbaccel does not run TP)."""

    enable_async_tp: bool = False


@dataclasses.dataclass
class TorchContextParallelConfig:
    """Options of torch's context parallelism (validated; nbaccel does not run CP).

    ``cp_comm_strategy``: ``"allgather"`` or ``"alltoall"``; None takes
    ``PARALLELISM_CONFIG_CP_COMM_STRATEGY``, else ``"allgather"``.
    """

    cp_comm_strategy: str | None = None

    def __post_init__(self) -> None:
        if self.cp_comm_strategy is None:
            self.cp_comm_strategy = parallelism_config_defaults().get(
                "cp_comm_strategy", "allgather"
            )
        if self.cp_comm_strategy not in ("allgather", "alltoall"):
            raise ValueError(
                f"Invalid cp_comm_strategy: {self.cp_comm_strategy}. Must be one of 'allgather' "
                "or 'alltoall'."
            )


@dataclasses.dataclass
class DeepSpeedSequenceParallelConfig:
    """Options of DeepSpeed's sequence parallelism (accepted; nbaccel does not run it)."""

    sp_seq_length: int | None = None
    sp_seq_length_is_variable: bool | None = None
    sp_attn_implementation: str | None = None


@dataclasses.dataclass
class TorchTensorParallelPlugin:
    """Accelerate's tensor-parallel plugin: constructing it explains that nbaccel has no TP."""

    tp_size: int = 1
    torch_device_mesh: Any = None

    def __post_init__(self) -> None:
        refuse("tensor, context or sequence parallelism", "TorchTensorParallelPlugin(...)")


def _size(name: str, value: Any, defaults: dict[str, str]) -> int:
    if value is None:
        raw = defaults.get(name, "1")
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(
                f"PARALLELISM_CONFIG_{name.upper()}={raw!r} is not an integer."
            ) from None
    if not is_int(value) or value < 1:
        raise ValueError(f"ParallelismConfig({name}={value!r}): must be an int of at least 1.")
    return value


class _EnabledDims:
    """A read-only attribute of :class:`ParallelismConfig`: the dimensions among ``dims``
    whose size is above 1, in that order."""

    def __init__(self, *dims: str, doc: str) -> None:
        self.dims = dims
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, config: None, owner: type) -> _EnabledDims: ...

    @overload
    def __get__(self, config: ParallelismConfig, owner: type) -> list[str]: ...

    def __get__(self, config: ParallelismConfig | None, owner: type) -> _EnabledDims | list[str]:
        if config is None:
            return self
        sizes = config._sizes()
        return [d for d in self.dims if sizes[d] > 1]

    def __set__(self, config: ParallelismConfig, value: object) -> None:
        raise AttributeError(f"property {self.name!r} of 'ParallelismConfig' object has no setter")


@dataclasses.dataclass
class ParallelismConfig:
    """How the processes divide into parallel dimensions (``dp_replicate * dp_shard * tp * cp
    * sp`` = the number of processes). Unset sizes take ``PARALLELISM_CONFIG_*`` variables,
    else 1.

    nbaccel runs the data-parallel dimensions: ``dp_replicate`` (DDP) and ``dp_shard`` (FSDP
    over every process). ``tp``, ``cp`` and ``sp`` sizes above 1 are refused when an
    ``Accelerator`` receives the config, with what to use instead.
    """

    dp_replicate_size: int | None = None
    dp_shard_size: int | None = None
    tp_size: int | None = None
    cp_size: int | None = None
    cp_backend: str | None = None
    sp_size: int | None = None
    sp_backend: str | None = None
    tp_handler: TorchTensorParallelConfig | None = None
    cp_handler: TorchContextParallelConfig | None = None
    sp_handler: DeepSpeedSequenceParallelConfig | None = None

    device_mesh = None

    def __post_init__(self) -> None:
        defaults = parallelism_config_defaults()
        for name in ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "sp_size"):
            setattr(self, name, _size(name, getattr(self, name), defaults))
        self.cp_backend = self.cp_backend or defaults.get("cp_backend", "torch")
        self.sp_backend = self.sp_backend or defaults.get("sp_backend", "deepspeed")
        if self.cp_backend != "torch":
            raise ValueError(f"cp_backend must be 'torch', got {self.cp_backend!r}.")
        if self.sp_backend != "deepspeed":
            raise ValueError(f"sp_backend must be 'deepspeed', got {self.sp_backend!r}.")
        if self.cp_handler is not None and not isinstance(
            self.cp_handler, TorchContextParallelConfig
        ):
            raise ValueError("cp_handler must be a TorchContextParallelConfig.")
        if self.cp_enabled and self.sp_enabled:
            raise ValueError(
                "Context parallelism (cp_size > 1) and sequence parallelism (sp_size > 1) "
                "exclude each other; set one of them to 1."
            )
        pure_replication = self.dp_replicate_enabled and not self.dp_shard_enabled
        if (self.tp_enabled or self.cp_enabled) and pure_replication:
            raise ValueError(
                "tp/cp_size > 1 cannot be combined with pure replication "
                "(dp_replicate_size > 1, dp_shard_size == 1); shard instead."
            )
        if self.tp_enabled and self.tp_handler is None:
            self.tp_handler = TorchTensorParallelConfig()
        if self.cp_enabled and self.cp_handler is None:
            self.cp_handler = TorchContextParallelConfig()
        if self.sp_enabled and self.sp_handler is None:
            self.sp_handler = DeepSpeedSequenceParallelConfig()

    def _sizes(self) -> dict[str, int]:
        return {dim: int(getattr(self, f"{dim}_size")) for dim in _MESH_ORDER}

    dp_replicate_enabled = property(lambda self: self.dp_replicate_size > 1)
    dp_shard_enabled = property(lambda self: self.dp_shard_size > 1)
    tp_enabled = property(lambda self: self.tp_size > 1)
    cp_enabled = property(lambda self: self.cp_size > 1)
    sp_enabled = property(lambda self: self.sp_size > 1)

    @property
    def total_size(self) -> int:
        """Processes the config describes: the product of every size."""
        sizes = self._sizes()
        total = 1
        for size in sizes.values():
            total *= size
        return total

    @property
    def data_parallel_size(self) -> int:
        """``dp_replicate_size * dp_shard_size``."""
        return int(self.dp_replicate_size) * int(self.dp_shard_size)  # type: ignore[arg-type]

    @property
    def non_data_parallel_size(self) -> int:
        """``tp_size * cp_size * sp_size``."""
        return int(self.tp_size) * int(self.cp_size) * int(self.sp_size)  # type: ignore[arg-type]

    dp_dim_names = _EnabledDims(
        "dp_replicate", "dp_shard", doc="The enabled data-parallel mesh dimensions."
    )

    non_dp_dim_names = _EnabledDims(
        "tp", "cp", "sp", doc="The enabled tensor/context/sequence mesh dimensions."
    )

    dp_shard_cp_dim_names = _EnabledDims(
        "dp_shard", "cp", doc="The enabled dimensions among ``dp_shard`` and ``cp``."
    )

    dp_cp_dim_names = _EnabledDims(
        "dp_replicate",
        "dp_shard",
        "cp",
        doc="The enabled dimensions among ``dp_replicate``, ``dp_shard`` and ``cp``.",
    )

    @property
    def fsdp_dim_names(self) -> list[str]:
        """The mesh dimensions FSDP shards over."""
        return (["dp_replicate"] if self.dp_replicate_enabled else []) + ["dp_shard_cp"]

    @property
    def active_mesh_dims(self) -> list[str]:
        """Every enabled dimension, data-parallel first."""
        return self.dp_dim_names + self.non_dp_dim_names

    def check_supported(self) -> None:
        """Raise the clear error when a dimension nbaccel does not run is enabled."""
        refused = [f"{d}_size={self._sizes()[d]}" for d in self.non_dp_dim_names]
        if refused:
            refuse(
                "tensor, context or sequence parallelism",
                f"ParallelismConfig({', '.join(refused)})",
            )

    def build_device_mesh(self, device_type: str) -> Any:
        """A ``DeviceMesh`` with the enabled dimensions (canonical order, flattened ``dp``,
        ``dp_shard_cp`` and ``dp_cp`` views); None when every size is 1. Needs the process
        group of ``total_size`` processes."""

        names, shape = self._get_mesh()
        if not names:
            return None
        # looked up on the module at each call, as torch.distributed.device_mesh is patched
        # by code that fakes a mesh (Accelerate's own tests do)
        mesh = device_mesh.init_device_mesh(device_type, shape, mesh_dim_names=names)
        for dims, flat in (
            (self.dp_dim_names, "dp"),
            (self.dp_shard_cp_dim_names, "dp_shard_cp"),
            (self.dp_cp_dim_names, "dp_cp"),
        ):
            if dims:
                mesh[dims]._flatten(flat)  # type: ignore[index]  # a list, as Accelerate passes
        return mesh

    def _get_mesh(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """The mesh's dimension names (enabled ones, canonical order) and sizes."""
        dims = tuple(d for d in _MESH_ORDER if d in self.active_mesh_dims)
        return dims, tuple(self._sizes()[d] for d in dims)

    def get_device_mesh(self, device_type: str | None = None) -> Any:
        """The mesh, built on first use with ``device_type``."""
        if self.device_mesh is None:
            if device_type is None:
                raise ValueError("Pass a device_type (e.g. 'cpu' or 'cuda') to build the mesh.")
            self.device_mesh = self.build_device_mesh(device_type)
        elif device_type is not None and self.device_mesh.device_type != device_type:
            raise ValueError(
                f"The device mesh was built for {self.device_mesh.device_type!r}, not "
                f"{device_type!r}."
            )
        return self.device_mesh

    def fit_to(self, num_processes: int) -> None:
        """Check the sizes against the job: all 1 means plain data parallelism over every
        process; otherwise ``total_size`` must equal ``num_processes``."""
        if self.total_size == 1 and num_processes > 1:
            self.dp_replicate_size = num_processes
        elif self.total_size != num_processes:
            raise ValueError(
                f"ParallelismConfig total_size ({self.total_size}) does not match the "
                f"{num_processes} processes of the job; adjust dp_replicate_size / "
                "dp_shard_size so that their product is the number of processes."
            )
