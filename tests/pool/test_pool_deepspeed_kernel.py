"""DeepSpeed in the warm pool, driven from a real Jupyter kernel: a ``%%nbaccel`` cell builds
a ZeRO-2 engine in the pool's ranks and trains it like one process; a later cell builds a
ZeRO-3 engine beside it; the pool's end leaves no rank behind."""

from __future__ import annotations

from collections.abc import Iterator

import psutil
import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from tests.support.kernel import Kernel, running_kernel

pytestmark = [pytest.mark.notebook, pytest.mark.timeout(240)]

SETUP = """
%%nbaccel
import torch
from torch import nn
from nbaccel import Accelerator
from nbaccel.utils import DeepSpeedPlugin

def data(batch):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 8, generator=g), torch.randn(32, 1, generator=g)
    rows = torch.utils.data.TensorDataset(x, y)
    return torch.utils.data.DataLoader(rows, batch_size=batch)

def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

def build(stage):
    acc = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=stage))
    model = net()
    return (acc, *acc.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-2), data(4)))

acc, engine, opt, loader = build(2)
for x, y in loader:
    acc.backward(nn.functional.mse_loss(engine(x), y))
    opt.step(); opt.zero_grad()
print(f"stage {engine.zero_optimization_stage()} steps {engine.global_steps}")
"""

# the same training on one process, in the kernel itself, over the global batches of 8
REFERENCE = """
import torch
from torch import nn
g = torch.Generator().manual_seed(0)
x, y = torch.randn(32, 8, generator=g), torch.randn(32, 1, generator=g)
rows = torch.utils.data.TensorDataset(x, y)
torch.manual_seed(0)
ref = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
for x, y in torch.utils.data.DataLoader(rows, batch_size=8):
    nn.functional.mse_loss(ref(x), y).backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
    ref_opt.step(); ref_opt.zero_grad()
"""


@pytest.fixture(scope="module")
def pool() -> Iterator[Kernel]:
    with running_kernel() as kernel:
        kernel.ok("%load_ext nbaccel")
        cell = kernel.execute("%nbaccel start -n 2 --cpu", timeout=120)
        assert cell.status == "ok", cell.describe()
        yield kernel
        kernel.execute("%nbaccel stop", timeout=60)


def test_a_cell_builds_an_engine_that_trains_like_one_process(pool: Kernel) -> None:
    cell = pool.execute(SETUP.strip(), timeout=180)
    assert cell.status == "ok", cell.describe()
    assert "[rank0]: stage 2 steps 4" in cell.stdout, cell.describe()
    assert "[rank1]: stage 2 steps 4" in cell.stdout, cell.describe()
    pool.ok(REFERENCE)
    pool.ok("%%nbaccel\nweights = {k: v.tolist() for k, v in acc.get_state_dict(engine).items()}")
    pool.ok("from nbaccel.magics import active_pool\ngot = active_pool().pull('weights')[0]")
    check = pool.execute(
        "worst = max((torch.tensor(got[k]) - v).abs().max().item()"
        " for k, v in ref.state_dict().items())\nprint('worst', worst)\nassert worst < 1e-6"
    )
    assert check.status == "ok", check.describe()


def test_a_later_cell_builds_another_engine(pool: Kernel) -> None:
    cell = pool.execute(
        "%%nbaccel\nacc3, engine3, opt3, loader3 = build(3)\n"
        "x, y = next(iter(loader3))\n"
        "acc3.backward(nn.functional.mse_loss(engine3(x), y)); opt3.step()\n"
        "print('second', engine3.zero_optimization_stage(), engine3.global_steps,"
        " acc3.deepspeed_plugin.zero_stage, engine.zero_optimization_stage())",
        timeout=180,
    )
    assert cell.status == "ok", cell.describe()
    assert "[rank0]: second 3 1 3 2" in cell.stdout, cell.describe()


def test_stopping_the_pool_leaves_no_rank(pool: Kernel) -> None:
    ranks = psutil.Process(pool.pid).children(recursive=True)
    assert ranks, "the pool has no ranks"
    pool.ok("%nbaccel stop")
    _, alive = psutil.wait_procs(ranks, timeout=30)
    assert not alive, [p.pid for p in alive]
