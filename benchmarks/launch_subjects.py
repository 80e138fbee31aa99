"""The launch-latency subjects: for each, the cell a user would write in a notebook.

Every subject's cell defines, in ``__main__`` (the notebook), a function that prints one line
(``nbaccel-bench alive rank=R``), joins the process group, does one all-reduce of a one-element
tensor and returns; and ``launch(world)``, which runs it on ``world`` CPU processes with that
subject's launcher and returns once every process is done. The same cells run in a plain Python
process (the script variant) and in a Jupyter kernel.

``torch.multiprocessing.start_processes`` with spawn pickles its function by reference, so it
cannot run a notebook-defined function: its subject imports :func:`torch_work` from this module,
as a notebook user has to. nbaccel's spawn ships the notebook-defined function by value.
"""

from __future__ import annotations

import re
import textwrap

__all__ = ["ALIVE", "BASELINE", "PEERS", "SUBJECTS", "Subject", "torch_work"]

# The line each rank prints first; the in-kernel benchmark watches for it on iopub.
ALIVE = re.compile(r"nbaccel-bench alive rank=(\d+)")


def torch_work(rank: int, world: int, port: int) -> float:
    """The function of the plain torch subjects (importable, as torch's spawn needs it;
    the fork subject takes the same one)."""
    print(f"nbaccel-bench alive rank={rank}", flush=True)
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    value = torch.ones(1)
    dist.all_reduce(value)
    dist.destroy_process_group()
    return float(value.item())


_PRELUDE = """
import os
import socket


def _bench_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
"""

_NBACCEL = """
from nbaccel import notebook_launcher


def work():
    print(f"nbaccel-bench alive rank={{os.environ['RANK']}}", flush=True)
    import torch
    import torch.distributed as dist
    from nbaccel import PartialState

    PartialState()
    value = torch.ones(1)
    dist.all_reduce(value)
    return float(value.item())


def launch(world):
    return notebook_launcher(work, num_processes=world, start_method="{method}")
"""

_ACCELERATE = """
from accelerate import notebook_launcher


def work():
    print(f"nbaccel-bench alive rank={os.environ['RANK']}", flush=True)
    import torch
    import torch.distributed as dist
    from accelerate import PartialState

    PartialState(cpu=True)  # without it, Accelerate would run one process on a CPU machine
    value = torch.ones(1)
    dist.all_reduce(value)
    return float(value.item())


def launch(world):
    return notebook_launcher(work, num_processes=world, use_port=str(_bench_port()))
"""

_FABRIC = """
from lightning.fabric import Fabric


def work(fabric):
    print(f"nbaccel-bench alive rank={fabric.global_rank}", flush=True)
    import torch
    import torch.distributed as dist

    value = torch.ones(1)  # Fabric joined the process group before calling work
    dist.all_reduce(value)
    return float(value.item())


def launch(world):
    # Fabric keeps the first port it chose in MASTER_PORT; give it a fresh one each time,
    # as every other subject gets
    os.environ["MASTER_PORT"] = str(_bench_port())
    fabric = Fabric(accelerator="cpu", devices=world, strategy="ddp_notebook")
    return fabric.launch(work)
"""

_TORCH = """
import torch.multiprocessing as mp
from benchmarks.launch_subjects import torch_work


def launch(world):
    return mp.start_processes(
        torch_work, args=(world, _bench_port()), nprocs=world, start_method="{method}"
    )
"""


class Subject:
    """One launcher: its label, the distribution it needs (``None``: nbaccel or torch), and
    the notebook cell that defines ``launch(world)``."""

    def __init__(self, label: str, short: str, cell: str, peer: str | None = None) -> None:
        self.label = label
        self.short = short  # for the plot's axis
        self.peer = peer
        self.cell = textwrap.dedent(_PRELUDE) + textwrap.dedent(cell)

    def __repr__(self) -> str:
        return f"Subject({self.label!r})"


SUBJECTS: dict[str, Subject] = {
    s.label: s
    for s in (
        Subject("nbaccel fork", "nbaccel\nfork", _NBACCEL.format(method="fork")),
        Subject("nbaccel spawn", "nbaccel\nspawn", _NBACCEL.format(method="spawn")),
        Subject("Accelerate notebook_launcher", "Accelerate", _ACCELERATE, peer="accelerate"),
        Subject("Lightning Fabric ddp_notebook", "Fabric\nddp_notebook", _FABRIC, "lightning"),
        Subject("torch start_processes fork", "torch\nfork", _TORCH.format(method="fork")),
        Subject("torch start_processes spawn", "torch\nspawn", _TORCH.format(method="spawn")),
    )
}
BASELINE = "nbaccel fork"
PEERS = {s.peer for s in SUBJECTS.values() if s.peer}
