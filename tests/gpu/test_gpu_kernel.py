"""The GPU path in a real Jupyter kernel: CUDA initialised by a cell, then fork refused naming that
cell's line, ``start_method="auto"`` switching to spawn and training on the GPU with the
dashboard's GPU-memory column filled from the driver, and a pool started after CUDA init (spawn)
running a ``%%nbaccel`` cell that trains on ``cuda:0``.

One GPU gives one NCCL rank at most (NCCL refuses two ranks on one device), so the two-rank launch
uses gloo (``cpu=True``) with a DDP model on ``cuda:0``: gloo reduces CUDA tensors too. Two ranks
on two GPUs over NCCL need a machine with two GPUs (tests/multiprocess holds those checks for
CPU ranks; on such a machine, drop ``cpu=True``).
"""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")
pytest.importorskip("ipywidgets")

from tests.support.kernel import running_kernel

pytestmark = [pytest.mark.gpu, pytest.mark.notebook, pytest.mark.timeout(600)]

_TRAIN = """
import json, time
import torch
from torch import nn
from nbaccel import notebook_launcher
from nbaccel.widgets import LaunchDashboard

def train():
    import torch
    from torch import nn
    from nbaccel import PartialState

    state = PartialState()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(16, 1).cuda(), device_ids=[0])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(state.process_index)
    target = (torch.arange(16.0) / 16).cuda()
    held = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")  # 512 MiB on the GPU
    losses = []
    for _ in range(80):
        x = torch.randn(32, 16, generator=generator).cuda()
        loss = nn.functional.mse_loss(model(x).squeeze(1), x @ target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    time.sleep(2.5)  # the dashboard reads memory every 0.5 s
    return {
        "rank": state.process_index,
        "device": str(next(model.parameters()).device),
        "first": losses[0],
        "last": losses[-1],
        "weights": model.module.weight.sum().item(),
        "held": held.numel(),
    }
"""


def test_fork_refused_after_cuda_init_then_auto_spawns_and_trains_with_gpu_memory_shown() -> None:
    with running_kernel() as kernel:
        kernel.ok(_TRAIN, timeout=60)
        touch = kernel.ok("x = 1\ny = torch.ones(1, device='cuda')")
        refused = kernel.execute(
            "notebook_launcher(train, num_processes=2, cpu=True, start_method='fork')",
            timeout=60,
        )
        assert refused.ename == "CudaInitializedError", refused.describe()
        assert f"In [{touch.execution_count}], line 2" in refused.error_text, refused.describe()
        assert 'start_method="spawn"' in refused.error_text
        launched = kernel.ok(
            "board = LaunchDashboard()\n"
            "results = notebook_launcher(train, num_processes=2, cpu=True, dashboard=board)\n"
            "shown = {r: v.gpu_memory for r, v in board.state.ranks.items()}\n"
            "print(json.dumps({'results': results, 'gpu_memory': shown, "
            "'table': board._table.value}))",
            timeout=240,
        )
    assert "with spawn" in launched.stdout, launched.describe()
    found = json.loads(launched.lines()[-1])
    print("\nkernel launch:", json.dumps({k: found[k] for k in ("results", "gpu_memory")}))
    results = found["results"]
    assert [r["rank"] for r in results] == [0, 1]
    for result in results:
        assert result["device"] == "cuda:0", result
        assert result["last"] < 0.2 * result["first"], result  # it trained
    assert results[0]["weights"] == results[1]["weights"]  # DDP kept the replicas equal
    for rank, used in found["gpu_memory"].items():  # read from the driver (NVML)
        assert used is not None and used >= 512 * 2**20, (rank, found["gpu_memory"])
    header = re.findall(r"<th[^>]*>(.*?)</th>", found["table"])
    column = header.index("GPU memory")
    rows = re.findall(r"<tr>(.*?)</tr>", found["table"])[1:]
    shown = [re.findall(r"<td[^>]*>(.*?)</td>", row)[column] for row in rows]
    assert len(shown) == 2 and all(re.fullmatch(r"\d+\.\d (MiB|GiB)", s) for s in shown), shown


_POOL_CELL = """%%nbaccel
import torch
from torch import nn
from nbaccel import Accelerator

accelerator = Accelerator(mixed_precision="bf16")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 256), nn.GELU(), nn.Linear(256, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
model, optimizer = accelerator.prepare(model, optimizer)
weight = torch.randn(32, device=accelerator.device)
losses = []
for _ in range(100):
    x = torch.randn(64, 32, device=accelerator.device)
    loss = nn.functional.mse_loss(model(x).squeeze(1).float(), x @ weight)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
print("trained on", accelerator.device, next(model.parameters()).device, losses[0], losses[-1])
"""


def test_a_pool_started_after_cuda_init_spawns_and_a_cell_trains_on_cuda_0() -> None:
    with running_kernel() as kernel:
        kernel.ok("%load_ext nbaccel\nimport torch\ny = torch.ones(1, device='cuda')")
        refused = kernel.execute("%nbaccel start -n 1 --start_method fork", timeout=60)
        assert refused.ename == "CudaInitializedError", refused.describe()
        started = kernel.ok("%nbaccel start -n 1", timeout=180)
        assert "is ready" in started.stdout, started.describe()
        method = kernel.value("get_ipython().magics_manager.registry['PoolMagics'].pool.method")
        assert method == "'spawn'", method
        trained = kernel.ok(_POOL_CELL, timeout=180)
        devices = kernel.value(
            "[row['device'] for row in "
            "get_ipython().magics_manager.registry['PoolMagics'].pool.status()]"
        )
        kernel.ok("%nbaccel stop", timeout=60)
    print("\npool cell:", trained.stdout.strip(), "\npool status devices:", devices)
    line = re.search(r"trained on (\S+) (\S+) (\S+) (\S+)", trained.stdout)
    assert line, trained.describe()
    assert line.group(1) == "cuda:0" and line.group(2) == "cuda:0", trained.describe()
    assert float(line.group(4)) < 0.2 * float(line.group(3)), trained.describe()
    assert devices == "['cuda:0']", devices  # what %nbaccel status shows
