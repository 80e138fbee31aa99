"""notebook_launcher on the XLA path, through the real ``xmp.spawn``, on torch_xla's CPU device.

Without ``num_processes`` the launch goes through torch_xla's process pool (a forked worker
process per host; one CPU device here); ``num_processes=1`` runs the function in the calling
process, as ``xmp.spawn(nprocs=1)`` does. Both run in a fresh interpreter: torch_xla refuses to
spawn once its runtime has started in the calling process.
"""

from __future__ import annotations

import json

from xla_helpers import run_script

_SCRIPT = """
import json, os
import torch
from nbaccel import Accelerator, PartialState, notebook_launcher

def work(scale):
    state = PartialState()
    print(f"core {state.process_index} works on {state.device}", flush=True)
    total = (torch.ones(4, device=state.device) * scale).sum()
    return [str(state.distributed_type), str(state.device), total.item(), os.getpid(),
            state.mixed_precision]

def bf16(_):
    acc = Accelerator()
    model = acc.prepare(torch.nn.Linear(4, 4))
    with acc.autocast():
        inner = torch.nn.functional.linear(torch.ones(2, 4, device=acc.device), model.weight)
    outer = model(torch.ones(2, 4, device=acc.device))
    return [acc.mixed_precision, str(inner.dtype), str(outer.dtype), os.environ.get("XLA_USE_BF16")]

def fail(_):
    raise KeyError("core failed on purpose")

print("PARENT", os.getpid())
print("POOL", json.dumps(notebook_launcher(work, (3,))))
try:
    notebook_launcher(fail, (0,))
except KeyError as exc:
    print("POOL-ERROR", type(exc).__name__, repr(str(exc.__cause__))[:300])
print("HERE", json.dumps(notebook_launcher(work, (2,), num_processes=1)))
print("BF16", json.dumps(notebook_launcher(bf16, (0,), num_processes=1, mixed_precision="bf16")))
"""


def _lines(out: str) -> dict[str, str]:
    return {
        line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.splitlines() if " " in line
    }


def test_notebook_launcher_runs_on_the_xla_device_through_xmp_spawn() -> None:
    out = run_script(_SCRIPT, {"PJRT_DEVICE": "CPU"})
    lines = _lines(out)
    parent = int(lines["PARENT"])
    # the process pool: one forked worker process (one CPU device), its output on our stdout
    ((kind, device, total, pid, precision),) = json.loads(lines["POOL"])
    assert (kind, device, total, precision) == ("XLA", "xla:0", 12.0, "no")
    assert pid != parent
    assert "Launching on the XLA device (CPU, every core of this host)." in out
    # a failing core: the cell gets the function's own exception, with the core named
    assert lines["POOL-ERROR"].startswith("KeyError")
    assert "rank 0" in lines["POOL-ERROR"]
    # num_processes=1: xmp.spawn runs the function here
    ((kind, device, total, pid, _),) = json.loads(lines["HERE"])
    assert (kind, device, total, pid) == ("XLA", "xla:0", 8.0, parent)
    assert "Launching on the XLA device (CPU, 1 core)." in out
    assert out.count("core 0 works on xla:0") == 2
    # bf16 off TPU: autocast to bfloat16 on the XLA device, outputs back in float32
    ((precision, inner, outer, use_bf16),) = json.loads(lines["BF16"])
    assert (precision, inner, outer, use_bf16) == ("bf16", "torch.bfloat16", "torch.float32", None)
