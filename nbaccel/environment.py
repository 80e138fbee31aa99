"""The only place that reads launch environment variables and detects the platform.

Everything nbaccel knows about how the current process was started (by ``torchrun``,
``torch.distributed.launch --use-env``, ``mpirun``, nbaccel's own launchers, or not at all)
comes from :func:`read_launch_environment`. Choosing the device and the process-group backend
happens in :func:`choose_device`, which never initialises CUDA: devices are counted through
NVML or the driver's device files, never through the CUDA runtime.

Launchers write the variables through :func:`launch_variables`, so the names live here only.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = [
    "DeviceChoice",
    "LaunchEnvironment",
    "accelerate_config_candidates",
    "choose_device",
    "config_file_override",
    "cuda_device_count",
    "debug_mode_requested",
    "hardware_description",
    "in_colab",
    "in_kaggle",
    "in_notebook",
    "launch_variables",
    "log_level_requested",
    "nbaccel_default_config_path",
    "read_launch_environment",
    "sanity_fail_rank",
    "tpu_requested",
    "user_thread_count",
    "xla_available",
    "xla_topology",
]

_TRUE = {"1", "true", "yes", "on", "y"}
_FALSE = {"0", "false", "no", "off", "n", ""}
_PRECISIONS = ("no", "fp16", "bf16", "fp8")


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def _int_var(env: Mapping[str, str], *names: str, default: int | None = None) -> int | None:
    """Return the first of ``names`` that is set, as an int, or ``default``."""
    for name in names:
        raw = env.get(name)
        if raw is None or raw.strip() == "":
            continue
        try:
            return int(raw)
        except ValueError:
            raise ValueError(
                f"Environment variable {name}={raw!r} is not an integer. Unset it or set it to "
                "a whole number (it is normally set by the launcher that started this process)."
            ) from None
    return default


def _bool_var(env: Mapping[str, str], *names: str) -> bool:
    for name in names:
        raw = env.get(name)
        if raw is None:
            continue
        value = raw.strip().lower()
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise ValueError(
            f"Environment variable {name}={raw!r} is not a yes/no value; use one of "
            f"{sorted(_TRUE | (_FALSE - {''}))}."
        )
    return False


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

    @property
    def distributed(self) -> bool:
        """True when more than one process takes part."""
        return self.world_size > 1


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
            if value not in _PRECISIONS:
                raise ValueError(
                    f"Environment variable {name}={raw!r} is not a known precision; "
                    f"use one of {list(_PRECISIONS)}."
                )
            return value
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
        "NBACCEL_RESTART_COUNT": str(restart_count),
        "NBACCEL_FORK_LAUNCHED": "1" if fork_launched else "0",
        "NBACCEL_USE_CPU": "1" if use_cpu else "0",
    }
    if mixed_precision is not None:
        variables["NBACCEL_MIXED_PRECISION"] = mixed_precision
    if debug:
        variables["NBACCEL_DEBUG_MODE"] = "1"
    return variables


# --- platform detection -------------------------------------------------------------------


def in_notebook() -> bool:
    """True inside a Jupyter (IPython kernel) session."""
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    get = getattr(shell, "get_ipython", None)
    ip = get() if get else None
    return ip is not None and "IPKernelApp" in getattr(ip, "config", {})


def in_colab(environ: Mapping[str, str] | None = None) -> bool:
    """True on Google Colab."""
    env = _environ(environ)
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in env or "COLAB_GPU" in env


def in_kaggle(environ: Mapping[str, str] | None = None) -> bool:
    """True in a Kaggle kernel."""
    return "KAGGLE_KERNEL_RUN_TYPE" in _environ(environ)


def tpu_requested(environ: Mapping[str, str] | None = None) -> bool:
    """True when the environment says a TPU is attached (Colab, Kaggle, Cloud TPU VMs)."""
    env = _environ(environ)
    if env.get("PJRT_DEVICE", "").upper() == "TPU":
        return True
    return any(env.get(name) for name in ("TPU_NAME", "COLAB_TPU_ADDR", "TPU_ACCELERATOR_TYPE"))


def xla_available(environ: Mapping[str, str] | None = None) -> bool:
    """True when a TPU is requested and ``torch_xla`` imports. Never imports it otherwise."""
    if not tpu_requested(environ):
        return False
    if importlib.util.find_spec("torch_xla") is None:
        return False
    try:
        import torch_xla  # noqa: F401
    except Exception:  # a broken install must not break detection
        return False
    return True


_VISIBLE_SPLIT = re.compile(r"\s*,\s*")


def _visible_filter(count: int, environ: Mapping[str, str]) -> int:
    raw = environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return count
    ids = [item for item in _VISIBLE_SPLIT.split(raw.strip()) if item]
    visible = 0
    for item in ids:
        if not item.isdigit() or int(item) >= count:
            break  # the CUDA runtime stops at the first invalid entry
        visible += 1
    return visible


def cuda_device_count(environ: Mapping[str, str] | None = None) -> int:
    """Number of usable CUDA devices, counted without initialising CUDA in this process.

    Uses NVML (fork-safe) and falls back to the driver's ``/dev/nvidiaN`` files; the CUDA
    runtime is asked only when CUDA is already initialised in this process.
    """
    if not torch.backends.cuda.is_built():
        return 0
    if torch.cuda.is_initialized():
        return torch.cuda.device_count()
    counter = getattr(torch.cuda, "_device_count_nvml", None)
    if counter is not None:
        try:
            count = int(counter())
        except Exception:
            count = -1
        if count >= 0:
            return count
    dev = Path("/dev")
    physical = sum(1 for p in dev.glob("nvidia*") if p.name[len("nvidia") :].isdigit())
    return _visible_filter(physical, _environ(environ))


@dataclass(frozen=True)
class XlaTopology:
    """Ranks as the XLA runtime reports them (TPU processes are not launched through env)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int


def xla_topology() -> XlaTopology:
    """Ask ``torch_xla`` for this process's ordinals. Only call when :func:`xla_available`."""
    import torch_xla.runtime as xr

    return XlaTopology(
        rank=int(xr.global_ordinal()),
        world_size=int(xr.world_size()),
        local_rank=int(xr.local_ordinal()),
        local_world_size=int(getattr(xr, "local_process_count", lambda: xr.world_size())()),
    )


def hardware_description(gpus: bool) -> str:
    """A short description of the CPU or the NVIDIA GPUs, read without initialising CUDA."""
    if gpus:
        names = []
        for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
            for line in info.read_text(errors="replace").splitlines():
                if line.startswith("Model:"):
                    names.append(line.split(":", 1)[1].strip())
        count = cuda_device_count()
        model = f" ({names[0]})" if names else ""
        return f"{count} CUDA GPU{'s' if count != 1 else ''}{model}"
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip() + ", "
                break
    cores = os.cpu_count() or 1
    return f"CPU ({model}{cores} core{'s' if cores != 1 else ''})"


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


@dataclass(frozen=True)
class DeviceChoice:
    """The device a process trains on and the process-group backend it uses."""

    device: torch.device
    backend: str | None
    kind: str  # "cpu", "cuda", "mps" or "xla"


def choose_device(launch: LaunchEnvironment, cpu: bool = False) -> DeviceChoice:
    """Pick device and backend for this process without initialising CUDA.

    Args:
        launch: how the process was launched.
        cpu: force the CPU even when an accelerator is present.
    """
    force_cpu = cpu or launch.use_cpu
    distributed_backend = "gloo" if launch.distributed else None
    if force_cpu:
        return DeviceChoice(torch.device("cpu"), distributed_backend, "cpu")
    if xla_available():
        import torch_xla.core.xla_model as xm

        return DeviceChoice(torch.device(xm.xla_device()), "xla", "xla")
    count = cuda_device_count()
    if count > 0:
        index = launch.local_rank % count if launch.distributed else 0
        backend = "nccl" if launch.distributed else None
        return DeviceChoice(torch.device("cuda", index), backend, "cuda")
    if not launch.distributed and _mps_available():
        return DeviceChoice(torch.device("mps"), None, "mps")
    return DeviceChoice(torch.device("cpu"), distributed_backend, "cpu")


# --- config files and the sanity test's switch -------------------------------------------------


def config_file_override(environ: Mapping[str, str] | None = None) -> str | None:
    """The config file named by ``NBACCEL_CONFIG_FILE`` (also set by ``nbaccel launch`` for
    its processes, to the resolved config), or None."""
    raw = _environ(environ).get("NBACCEL_CONFIG_FILE", "").strip()
    return raw or None


def _home(env: Mapping[str, str]) -> Path:
    home = env.get("HOME", "").strip()
    return Path(home) if home else Path.home()


def nbaccel_default_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """``~/.cache/nbaccel/default_config.yaml`` (``~`` is ``$HOME``)."""
    return _home(_environ(environ)) / ".cache" / "nbaccel" / "default_config.yaml"


def accelerate_config_candidates(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Where Accelerate keeps its default config: ``$HF_HOME/accelerate/default_config.yaml``
    (``HF_HOME`` defaults to ``$XDG_CACHE_HOME/huggingface``, then ``~/.cache/huggingface``),
    then the older ``default_config.json`` beside it."""
    env = _environ(environ)
    hf_home = env.get("HF_HOME", "").strip()
    if hf_home:
        base = Path(hf_home).expanduser()
    else:
        xdg = env.get("XDG_CACHE_HOME", "").strip()
        base = (Path(xdg).expanduser() if xdg else _home(env) / ".cache") / "huggingface"
    folder = base / "accelerate"
    return [folder / "default_config.yaml", folder / "default_config.json"]


def sanity_fail_rank(environ: Mapping[str, str] | None = None) -> int | None:
    """The rank that ``nbaccel test``'s sanity script fails on purpose
    (``NBACCEL_TEST_FAIL_RANK``), or None."""
    return _int_var(_environ(environ), "NBACCEL_TEST_FAIL_RANK", default=None)
