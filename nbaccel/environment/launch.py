"""How this process was launched (torchrun, --use-env, mpirun, nbaccel, none), and the
variables launchers write."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from ..enums import PRECISIONS
from ._vars import _TRUE, _bool_var, _environ, _int_var


@dataclass(frozen=True)
class LaunchEnvironment:
    """How this process was launched, as read from its environment.

    Attributes:
        rank: global index of this process (0 when not launched).
        world_size: number of processes in the job (1 when not launched).
        local_rank: index of this process on its machine.
        local_world_size: number of processes on this machine.
        node_rank: index of this machine.
        master_addr: address of the rendezvous host, if any.
        master_port: port of the rendezvous host, if any.
        restart_count: how many times the group was restarted before this attempt.
        launcher: ``"none"``, ``"torchrun"``, ``"env"``, ``"mpi"`` or ``"nbaccel"``.
        fork_launched: the process was forked by nbaccel's notebook launcher.
        debug: debug mode was asked for (``NBACCEL_DEBUG_MODE`` / ``ACCELERATE_DEBUG_MODE``).
        mixed_precision: precision chosen by the launcher, or None.
        use_cpu: the launcher asked for CPU only.
        torch_device: the device asked for with ``NBACCEL_TORCH_DEVICE`` or
            ``ACCELERATE_TORCH_DEVICE`` (e.g. ``"cuda:1"``), used as it is; None when unset.
        precision_warned: the launcher already told the user, in the notebook, that its
            ``mixed_precision`` trains in full precision on this device (``fp16`` on a CPU).
        store_prefix: the launch's secret prefix of every key its ranks write to the store
            (``NBACCEL_STORE_PREFIX``, set by a launch on other machines), or None.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    restart_count: int = 0
    launcher: str = "none"
    fork_launched: bool = False
    debug: bool = False
    mixed_precision: str | None = None
    use_cpu: bool = False
    torch_device: str | None = None
    precision_warned: bool = False
    store_prefix: str | None = None

    @property
    def distributed(self) -> bool:
        """True when more than one process takes part."""
        return self.world_size > 1

    @property
    def launched(self) -> bool:
        """True when a launcher started this process (its variables are set), whatever the
        number of processes; False for a process started on its own."""
        return self.launcher != "none"


def _which_launcher(env: Mapping[str, str]) -> str:
    if env.get("NBACCEL_LAUNCHED"):
        return "nbaccel"
    if env.get("TORCHELASTIC_RUN_ID") is not None:
        return "torchrun"
    if env.get("RANK") is not None or env.get("WORLD_SIZE") is not None:
        return "env"
    if env.get("OMPI_COMM_WORLD_SIZE") is not None or env.get("PMI_SIZE") is not None:
        return "mpi"
    return "none"


def _precision_var(env: Mapping[str, str]) -> str | None:
    for name in ("NBACCEL_MIXED_PRECISION", "ACCELERATE_MIXED_PRECISION"):
        raw = env.get(name)
        if raw:
            value = raw.strip().lower()
            if value not in PRECISIONS:
                raise ValueError(
                    f"Environment variable {name}={raw!r} is not a known precision; "
                    f"use one of {list(PRECISIONS)}."
                )
            return value
    return None


def _device_var(env: Mapping[str, str]) -> str | None:
    for name in ("NBACCEL_TORCH_DEVICE", "ACCELERATE_TORCH_DEVICE"):
        raw = env.get(name, "").strip()
        if raw:
            try:
                return str(torch.device(raw))
            except (RuntimeError, ValueError):
                raise ValueError(
                    f"Environment variable {name}={raw!r} is not a torch device; use a name "
                    "such as 'cpu', 'cuda', 'cuda:1' or 'mps', or unset it."
                ) from None
    return None


def read_launch_environment(environ: Mapping[str, str] | None = None) -> LaunchEnvironment:
    """Read how this process was launched.

    Args:
        environ: the variables to read; ``os.environ`` when omitted.

    Raises:
        ValueError: a variable is malformed or the variables contradict each other.
    """
    env = _environ(environ)
    launcher = _which_launcher(env)
    mpi = launcher == "mpi"
    rank = _int_var(env, *(("OMPI_COMM_WORLD_RANK", "PMI_RANK") if mpi else ("RANK",)), default=0)
    world = _int_var(
        env, *(("OMPI_COMM_WORLD_SIZE", "PMI_SIZE") if mpi else ("WORLD_SIZE",)), default=1
    )
    assert rank is not None and world is not None
    local_names = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID") if mpi else ("LOCAL_RANK",)
    local_rank = _int_var(env, *local_names, default=rank if world > 1 else 0)
    local_size_names = ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")
    local_world = _int_var(env, *(local_size_names if mpi else ("LOCAL_WORLD_SIZE",)), default=None)
    assert local_rank is not None
    if local_world is None:
        local_world = world if launcher != "torchrun" else max(world, 1)
    if world < 1:
        raise ValueError(f"WORLD_SIZE must be at least 1, got {world}.")
    if not 0 <= rank < world:
        raise ValueError(
            f"RANK={rank} is outside 0..{world - 1} for WORLD_SIZE={world}; the launcher that "
            "started this process set inconsistent variables."
        )
    if not 0 <= local_rank < max(local_world, 1):
        raise ValueError(
            f"LOCAL_RANK={local_rank} is outside 0..{local_world - 1} for "
            f"LOCAL_WORLD_SIZE={local_world}."
        )
    node_rank = _int_var(env, "GROUP_RANK", "NODE_RANK", default=None)
    if node_rank is None:
        node_rank = rank // local_world if local_world else 0
    restart = _int_var(env, "NBACCEL_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT", default=0)
    assert restart is not None
    return LaunchEnvironment(
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        local_world_size=local_world,
        node_rank=node_rank,
        master_addr=env.get("MASTER_ADDR") or None,
        master_port=_int_var(env, "MASTER_PORT", default=None),
        restart_count=restart,
        launcher=launcher,
        fork_launched=_bool_var(env, "NBACCEL_FORK_LAUNCHED"),
        debug=debug_mode_requested(env),
        mixed_precision=_precision_var(env),
        use_cpu=_bool_var(env, "NBACCEL_USE_CPU", "ACCELERATE_USE_CPU"),
        torch_device=_device_var(env),
        precision_warned=_bool_var(env, "NBACCEL_PRECISION_WARNED"),
        store_prefix=env.get("NBACCEL_STORE_PREFIX") or None,
    )


def debug_mode_requested(environ: Mapping[str, str] | None = None) -> bool:
    """True when ``NBACCEL_DEBUG_MODE`` or ``ACCELERATE_DEBUG_MODE`` asks for debug checks."""
    env = _environ(environ)
    for name in ("NBACCEL_DEBUG_MODE", "ACCELERATE_DEBUG_MODE"):
        if env.get(name, "").strip().lower() in _TRUE:
            return True
    return False


def log_level_requested(environ: Mapping[str, str] | None = None) -> str | None:
    """The log level asked for with ``NBACCEL_LOG_LEVEL`` or ``ACCELERATE_LOG_LEVEL``, or None."""
    env = _environ(environ)
    for name in ("NBACCEL_LOG_LEVEL", "ACCELERATE_LOG_LEVEL"):
        value = env.get(name, "").strip()
        if value:
            return value
    return None


def user_thread_count(environ: Mapping[str, str] | None = None) -> int | None:
    """Threads per process the user asked for with ``OMP_NUM_THREADS``, or None."""
    count = _int_var(_environ(environ), "OMP_NUM_THREADS", default=None)
    return count if count is not None and count > 0 else None


def launch_variables(
    *,
    rank: int,
    world_size: int,
    local_rank: int,
    local_world_size: int,
    node_rank: int,
    master_addr: str,
    master_port: int,
    restart_count: int = 0,
    fork_launched: bool = False,
    mixed_precision: str | None = None,
    debug: bool = False,
    use_cpu: bool = False,
    precision_warned: bool = False,
) -> dict[str, str]:
    """The variables a launcher sets in a worker so that :func:`read_launch_environment` and
    torch's ``env://`` rendezvous see the job."""
    variables = {
        "NBACCEL_LAUNCHED": "1",
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(local_world_size),
        "GROUP_RANK": str(node_rank),
        "NODE_RANK": str(node_rank),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "NBACCEL_FORK_LAUNCHED": "1" if fork_launched else "0",
    }
    variables.update(
        choice_variables(
            mixed_precision=mixed_precision,
            use_cpu=use_cpu,
            restart_count=restart_count,
            debug=debug,
            precision_warned=precision_warned,
        )
    )
    return variables


def choice_variables(
    *,
    mixed_precision: str | None,
    use_cpu: bool | None = None,
    restart_count: int | None = None,
    debug: bool = False,
    precision_warned: bool = False,
) -> dict[str, str]:
    """The variables that carry a launcher's choices into the processes it runs (workers, the
    kernel itself with one process, a TPU's cores): the one place their names are written.
    None leaves a variable out."""
    variables: dict[str, str] = {}
    if mixed_precision is not None:
        variables["NBACCEL_MIXED_PRECISION"] = mixed_precision
    if use_cpu is not None:
        variables["NBACCEL_USE_CPU"] = "1" if use_cpu else "0"
    if restart_count is not None:
        variables["NBACCEL_RESTART_COUNT"] = str(restart_count)
    if debug:
        variables["NBACCEL_DEBUG_MODE"] = "1"
    if precision_warned:
        variables.update(precision_warned_variables())
    return variables


def store_prefix_variables(prefix: str) -> dict[str, str]:
    """The variable that gives a launch's ranks the secret prefix of their store keys."""
    return {"NBACCEL_STORE_PREFIX": prefix}


def precision_warned_variables() -> dict[str, str]:
    """The variable by which a launcher that warned about its ``mixed_precision`` in the
    notebook keeps its processes from warning again."""
    return {"NBACCEL_PRECISION_WARNED": "1"}


# --- platform detection -------------------------------------------------------------------
