"""Shared pieces of the fault tests: a small real training run with a fault injected at a
chosen step, and snapshots that prove a launch left nothing behind.

The functions here run inside launched workers (fork or spawn), so they live in an importable
module. A fault is chosen by name: ``raise``, ``sigkill``, ``exit3``, ``hang``, ``oom``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import resource
import signal
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from nbaccel import Accelerator, PartialState, ProjectConfiguration, set_seed

# /dev/shm names that a launcher, torch or multiprocessing would leave there. Other jobs on a
# shared machine may write to /dev/shm too, so only these count as ours.
_SHM_PREFIXES = (
    "torch_",
    "sem.",
    "mp-",
    "psm_",
    "pymp",
    "nbaccel",
    "wnsm_",
    "deepspeed_allreduce_buffer_",  # DeepSpeed's CPU communication op: the launcher removes it
)

EPOCHS = 3
STEPS_PER_EPOCH = 4  # 32 samples, batch 4, 2 processes


# -- the training run -------------------------------------------------------------------------


class Progress:
    """A registered object: epochs finished."""

    def __init__(self) -> None:
        self.epoch = 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch = int(state["epoch"])


def _data() -> TensorDataset:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(32, 8, generator=gen)
    return TensorDataset(x, (x[:, :1] * 2 - x[:, 1:2]).clone())


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 1))


def inject(fault: str, cgroup: str | None = None) -> None:
    """Make this rank fail in the way ``fault`` names (called by the failing rank)."""
    if fault == "raise":
        raise ValueError("injected fault at this step")
    if fault == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "exit3":
        os._exit(3)
    if fault == "hang":  # a stuck rank: its peer then waits inside the next all-reduce
        time.sleep(1000)
    if fault == "oom":
        exhaust_memory(cgroup)


def train(
    fault: str | None = None,
    fault_rank: int = 1,
    fault_step: int = 5,
    cgroup: str | None = None,
    project_dir: str | None = None,
    fault_attempts: tuple[int, ...] = (0,),
    announce: bool = False,
    step_delay: float = 0.0,
    hold_save: int | None = None,
) -> dict[str, torch.Tensor]:
    """A real DDP training run on 2 processes: AdamW, dropout, shuffled data, EPOCHS epochs.

    With ``project_dir`` a checkpoint is saved after every epoch, and a restarted attempt
    (``PartialState().restart_count > 0``) resumes from the newest one. ``fault`` is injected
    on ``fault_rank`` when the global step reaches ``fault_step`` on one of
    ``fault_attempts`` (``cgroup``: where ``"oom"`` runs out of memory).
    ``announce`` prints ``STEP n`` (and ``PORT p``) as training goes, ``step_delay`` slows each
    step down, and ``hold_save=i`` holds every rank inside the i-th ``save_state`` (a pre-save
    hook prints ``SAVING`` and sleeps), so that a test can interrupt a save. Returns the final
    weights.
    """
    attempt = PartialState().restart_count
    config = None
    if project_dir is not None:
        config = ProjectConfiguration(project_dir=project_dir, automatic_checkpoint_naming=True)
    acc = Accelerator(project_config=config)
    set_seed(11)
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(_data(), batch_size=4, shuffle=True)
    model, optimizer, loader = acc.prepare(model, optimizer, loader)
    progress = Progress()
    acc.register_for_checkpointing(progress)
    if project_dir is not None and attempt > 0:
        acc.load_state()
    if hold_save is not None:
        acc.register_save_state_pre_hook(_holder(acc, hold_save))
    if announce:
        print(f"PORT {os.environ['MASTER_PORT']}", flush=True)
    step = progress.epoch * STEPS_PER_EPOCH
    for epoch in range(progress.epoch, EPOCHS):
        loader.set_epoch(epoch) if hasattr(loader, "set_epoch") else None
        for x, y in loader:
            if announce:
                print(f"STEP {step}", flush=True)
            time.sleep(step_delay)
            if (
                fault is not None
                and step == fault_step
                and acc.process_index == fault_rank
                and attempt in fault_attempts
            ):
                inject(fault, cgroup)
            loss = ((model(x) - y) ** 2).mean()
            acc.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
        progress.epoch = epoch + 1
        if project_dir is not None:
            acc.save_state()
    return {k: v.detach().clone() for k, v in acc.get_state_dict(model).items()}


def resume_point(project_dir: str) -> tuple[int, int]:
    """Load the newest complete checkpoint of ``project_dir`` into a fresh training setup;
    returns (the number the next checkpoint gets, epochs finished)."""
    config = ProjectConfiguration(project_dir=project_dir, automatic_checkpoint_naming=True)
    acc = Accelerator(project_config=config)
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(_data(), batch_size=4, shuffle=True)
    acc.prepare(model, optimizer, loader)
    progress = Progress()
    acc.register_for_checkpointing(progress)
    acc.load_state()
    return acc.save_iteration, progress.epoch


def incomplete_checkpoints(root: Path) -> list[str]:
    """Entries of ``root`` under a checkpoint's name that are not complete: no manifest, or a
    file missing or of another size than the manifest records. Hidden entries (staging
    directories, which loading never considers) are not checkpoints and are not listed."""
    import json

    bad = []
    for entry in sorted(root.iterdir()) if root.is_dir() else []:
        if entry.name.startswith("."):
            continue
        manifest = entry / "checkpoint.json"
        if not manifest.is_file():
            bad.append(f"{entry.name}: no manifest")
            continue
        for name, size in json.loads(manifest.read_text())["files"].items():
            path = entry / name
            if not path.is_file() or path.stat().st_size != size:
                bad.append(f"{entry.name}/{name}")
    return bad


def _holder(acc: Accelerator, number: int) -> Any:
    def hold(models: Any, weights: Any, output_dir: str) -> None:
        if acc.save_iteration == number:
            print(f"SAVING {output_dir}", flush=True)
            time.sleep(60)

    return hold


# -- memory --------------------------------------------------------------------------------------


def memory_cgroup_root() -> Path | None:
    """A memory cgroup directory this (root) process may create children in, or None.

    cgroup v2: the process's own cgroup when ``memory`` is among its controllers; cgroup v1:
    the process's directory in the ``memory`` hierarchy.
    """
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            base = Path("/sys/fs/cgroup") / path.lstrip("/")
            if "memory" in (base / "cgroup.controllers").read_text().split():
                return base if os.access(base, os.W_OK) else None
        if "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            if (base / "memory.limit_in_bytes").exists() and os.access(base, os.W_OK):
                return base
    return None


def oom_kills(cgroup: Path) -> int:
    """How many processes the kernel's OOM killer ended in ``cgroup``."""
    for name in ("memory.events", "memory.oom_control"):
        path = cgroup / name
        if path.exists():
            for line in path.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    return 0


@contextlib.contextmanager
def memory_limited_cgroup(limit: int) -> Iterator[Path | None]:
    """A fresh child memory cgroup limited to ``limit`` bytes (None where none can be made);
    removed afterwards."""
    root = memory_cgroup_root()
    if root is None:
        yield None
        return
    child = root / f"nbaccel-fault-{os.getpid()}-{time.monotonic_ns()}"
    try:
        child.mkdir()
        limit_file = "memory.max" if (child / "memory.max").exists() else "memory.limit_in_bytes"
        (child / limit_file).write_text(str(limit))
        if (child / "memory.swap.max").exists():
            (child / "memory.swap.max").write_text("0")
    except OSError:
        with contextlib.suppress(OSError):
            child.rmdir()
        yield None
        return
    try:
        yield child
    finally:
        deadline = time.monotonic() + 5
        while True:
            try:
                child.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def exhaust_memory(cgroup: str | None) -> None:
    """Allocate until the memory runs out: inside ``cgroup`` (the kernel's OOM killer ends the
    process) or, without one, under RLIMIT_AS (a MemoryError)."""
    if cgroup is not None and Path(cgroup, "cgroup.procs").exists():
        Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))
    else:
        usage = psutil.Process().memory_info().vms
        resource.setrlimit(resource.RLIMIT_AS, (usage + 256 * 2**20, resource.RLIM_INFINITY))
    hog = []
    size = 64 * 2**20
    for _ in range(64):  # up to 4 GiB, every page touched
        block = bytearray(size)
        block[::4096] = b"\x01" * len(range(0, size, 4096))
        hog.append(block)
    raise AssertionError("allocated 4 GiB without running out of memory")


# -- what a launch must not leave behind -----------------------------------------------------


def descendants() -> set[int]:
    """Live (non-zombie) descendants of this process."""
    found = set()
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if proc.status() != psutil.STATUS_ZOMBIE:
                found.add(proc.pid)
    return found


def _fd_kinds() -> dict[str, int]:
    kinds: dict[str, int] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        kind = target.split(":", 1)[0] if ":[" in target else "file"
        if kind in ("socket", "pipe"):
            kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def shm_entries() -> set[str]:
    """The entries of /dev/shm that a launch could have left (see ``_SHM_PREFIXES``)."""
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith(_SHM_PREFIXES)}
    except OSError:
        return set()


@dataclass(frozen=True)
class Leftovers:
    """What this process holds that a launch could leak."""

    children: frozenset[int]
    listening: frozenset[tuple[str, int]]
    fds: tuple[tuple[str, int], ...]
    temp: frozenset[str]
    shm: frozenset[str]

    @classmethod
    def take(cls) -> Leftovers:
        me = psutil.Process()
        listening = frozenset(
            (c.laddr.ip, c.laddr.port)
            for c in me.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN
        )
        return cls(
            frozenset(descendants()),
            listening,
            tuple(sorted(_fd_kinds().items())),
            frozenset(os.listdir(tempfile.gettempdir())),
            frozenset(shm_entries()),
        )

    def left_since(self, before: Leftovers) -> dict[str, Any]:
        """What is here now and was not ``before`` (empty: nothing left behind)."""
        diff: dict[str, Any] = {}
        if self.children - before.children:
            diff["processes"] = sorted(self.children - before.children)
        if self.listening - before.listening:
            diff["listening sockets"] = sorted(self.listening - before.listening)
        if dict(self.fds) != dict(before.fds):
            diff["socket/pipe descriptors"] = (dict(before.fds), dict(self.fds))
        if self.temp - before.temp:
            diff["temporary files"] = sorted(self.temp - before.temp)
        if self.shm - before.shm:
            diff["/dev/shm"] = sorted(self.shm - before.shm)
        return diff


def wait_clean(before: Leftovers, within: float = 5.0) -> dict[str, Any]:
    """Wait up to ``within`` s for the leftovers to go; return what is still there."""
    deadline = time.monotonic() + within
    left = Leftovers.take().left_since(before)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = Leftovers.take().left_since(before)
    return left


def processes_tagged(tag: str) -> list[int]:
    """Pids of every process on this machine whose environment holds ``NBACCEL_FAULT_TAG=tag``
    (a launch started in a subprocess passes its tag on to every worker it starts)."""
    needle = f"NBACCEL_FAULT_TAG={tag}".encode()
    found = []
    for pid in psutil.pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                tagged = needle in handle.read().split(b"\0")
            if tagged and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                found.append(pid)
        except (OSError, psutil.NoSuchProcess):
            continue
    return found


def loopback_only_sockets() -> dict[str, Any]:
    """Every inet socket of the launcher and of this worker while the group trains."""
    acc = Accelerator()
    model = acc.prepare(nn.Linear(4, 1))
    model(torch.ones(2, 4)).sum().backward()  # gloo's connections exist now
    dist.barrier()

    def sockets(proc: psutil.Process) -> list[tuple[str, str, str]]:
        out = []
        for c in proc.net_connections(kind="inet"):
            remote = c.raddr.ip if c.raddr else ""
            out.append((c.status, c.laddr.ip, remote))
        return out

    result = {
        "launcher": sockets(psutil.Process(os.getppid())),
        "worker": sockets(psutil.Process()),
    }
    dist.barrier()
    return result


def private_mode(path: Path) -> int:
    """The permission bits of ``path``."""
    return stat.S_IMODE(path.stat().st_mode)


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def is_loopback(address: str) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback addresses (::ffff:127.0.0.1)."""
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


# -- storage ----------------------------------------------------------------------------------


class Blob:
    """A registered object whose state is ``size`` bytes of tensor data."""

    def __init__(self, size: int) -> None:
        self.data = torch.zeros(size, dtype=torch.uint8)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"data": self.data}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.data = state["data"]


def _small_setup(project_dir: str, blob: Blob) -> tuple[Accelerator, nn.Module]:
    config = ProjectConfiguration(project_dir=project_dir, automatic_checkpoint_naming=True)
    acc = Accelerator(project_config=config)
    set_seed(5)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = acc.prepare(model, optimizer)
    acc.backward(model(torch.ones(4, 8)).sum())
    optimizer.step()
    acc.register_for_checkpointing(blob)
    return acc, model


def save_until_the_disk_is_full(project_dir: str, file_limit: int | None, big: int) -> None:
    """Save a small checkpoint, then one with a ``big``-byte registered object. With
    ``file_limit``, files may not grow past it (RLIMIT_FSIZE, SIGXFSZ ignored: EFBIG);
    without it the directory is expected to be on a small file system."""
    if file_limit is not None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, resource.RLIM_INFINITY))
    blob = Blob(1024)
    acc, _ = _small_setup(project_dir, blob)
    acc.save_state()
    blob.data = torch.ones(big, dtype=torch.uint8)
    acc.save_state()


def load_small(project_dir: str) -> tuple[int, int, list[float]]:
    """Load the newest checkpoint of :func:`save_until_the_disk_is_full`'s setup; returns the
    next checkpoint number, the registered object's size and the weights."""
    blob = Blob(1)
    acc, model = _small_setup(project_dir, blob)
    acc.load_state()
    weights = acc.get_state_dict(model)["weight"].flatten().tolist()
    return acc.save_iteration, int(blob.data.numel()), weights


def small_weights(project_dir: str) -> list[float]:
    """The weights :func:`_small_setup` trains to (what the first checkpoint holds)."""
    acc, model = _small_setup(project_dir, Blob(1))
    return acc.get_state_dict(model)["weight"].flatten().tolist()


def temp_entries_while_running() -> dict[str, list[str]]:
    """What the temporary directory and /dev/shm hold while this rank runs, after a
    collective (so every rank is up); also this process's open files there."""
    PartialState()
    dist.barrier()
    temp = tempfile.gettempdir()
    opened = [f.path for f in psutil.Process().open_files() if f.path.startswith(temp)]
    launcher = psutil.Process(os.getppid())
    opened += [f.path for f in launcher.open_files() if f.path.startswith(temp)]
    result = {"temp": sorted(os.listdir(temp)), "shm": sorted(shm_entries()), "open": opened}
    dist.barrier()
    return result


def save_and_watch_staging(project_dir: str) -> dict[str, Any]:
    """Save a checkpoint; a pre-save hook records the staging directory's name and mode."""
    seen: dict[str, Any] = {}

    def hook(models: Any, weights: Any, output_dir: str) -> None:
        seen["name"] = Path(output_dir).name
        seen["mode"] = private_mode(Path(output_dir))

    acc, _ = _small_setup(project_dir, Blob(16))
    acc.register_save_state_pre_hook(hook)
    final = Path(acc.save_state())
    acc.wait_for_everyone()
    seen["final_mode"] = private_mode(final)
    seen["entries"] = sorted(p.name for p in final.parent.iterdir())
    seen["partial"] = sorted(p.name for p in final.iterdir() if ".partial-" in p.name)
    return seen


def load_crafted(path: str) -> str:
    """Load a checkpoint directory into the small setup; returns 'loaded' (it must not)."""
    acc, _ = _small_setup(str(Path(path).parent / "unused"), Blob(1))
    acc.load_state(path)
    return "loaded"


class Evil:
    """Unpickling it runs ``touch sentinel``."""

    def __init__(self, sentinel: str) -> None:
        self.sentinel = sentinel

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.sentinel}",))
