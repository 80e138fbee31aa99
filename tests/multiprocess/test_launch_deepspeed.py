"""``nbaccel launch`` runs DeepSpeed in 2 real processes (CPU, gloo): with ``--use_deepspeed
--zero_stage 2`` on the command line, and with Accelerate's ``distributed_type: DEEPSPEED``
config file. Each rank's ``Accelerator()`` builds its plugin from the launch's variables alone;
``prepare`` gives DeepSpeed's engine, which trains one step."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import cli_helpers as h
import pytest

from nbaccel.environment import deepspeed_ops_folder

pytestmark = pytest.mark.multiprocess

# Each rank writes what it sees into rank{N}.json of the folder given as its argument.
SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path

    import torch
    from nbaccel import Accelerator

    accelerator = Accelerator()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    inputs, targets = next(iter(loader))
    with accelerator.accumulate(model):
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    plugin = accelerator.state.deepspeed_plugin
    record = {
        "distributed_type": str(accelerator.distributed_type),
        "num_processes": accelerator.num_processes,
        "zero_stage": plugin.zero_stage,
        "model_class": type(model).__name__,
        "engine_stage": model.zero_optimization_stage(),
        "engine_clipping": model.gradient_clipping(),
        "accumulation": accelerator.gradient_accumulation_steps,
        "loss": loss.item(),
        "variable": os.environ.get("ACCELERATE_USE_DEEPSPEED"),
    }
    out = Path(sys.argv[1]) / f"rank{accelerator.process_index}.json"
    out.write_text(json.dumps(record))
    """
)

CONFIG = textwrap.dedent(
    """
    compute_environment: LOCAL_MACHINE
    debug: false
    deepspeed_config:
      deepspeed_multinode_launcher: standard
      gradient_accumulation_steps: 2
      gradient_clipping: 0.5
      offload_optimizer_device: none
      offload_param_device: none
      zero3_init_flag: false
      zero_stage: 1
    distributed_type: DEEPSPEED
    downcast_bf16: 'no'
    machine_rank: 0
    main_training_function: main
    mixed_precision: 'no'
    num_machines: 1
    num_processes: 2
    rdzv_backend: static
    same_network: true
    tpu_env: []
    tpu_use_cluster: false
    tpu_use_sudo: false
    use_cpu: true
    """
)


def _buffers() -> set[Path]:
    """DeepSpeed's shared-memory buffers of this user (``deepspeed_shm_buffer``)."""
    return set(Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_{os.getuid()}_*"))


def _launch(home: Path, *options: str) -> tuple[str, list[dict[str, Any]]]:
    """``nbaccel launch OPTIONS script.py out``: its stderr up to the banner (the notes on
    the config file, then the banner line) and each rank's record. The processes leave no
    DeepSpeed buffer in /dev/shm behind (each removes its own as it ends)."""
    before = _buffers()
    (home / "script.py").write_text(SCRIPT)
    (home / "out").mkdir()
    done = h.nbaccel(
        "launch",
        *options,
        "script.py",
        str(home / "out"),
        home=home,
        TORCH_EXTENSIONS_DIR=deepspeed_ops_folder(),
    )
    assert done.returncode == 0, h.detail(done)
    records = [json.loads(p.read_text()) for p in sorted((home / "out").glob("rank*.json"))]
    assert len(records) == 2, h.detail(done)
    assert _buffers() <= before, _buffers() - before
    lines = done.stderr.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("nbaccel launch: "))
    return "\n".join(lines[: at + 1]), records


def test_use_deepspeed_and_zero_stage_on_the_command_line(tmp_path: Path) -> None:
    banner, records = _launch(
        tmp_path, "--use_deepspeed", "--zero_stage", "2", "--num_processes", "2"
    )
    assert "2 process(es) x 1 machine(s), DeepSpeed (ZeRO stage 2), cpu" in banner, banner
    for seen in records:
        assert seen["distributed_type"] == "DEEPSPEED" and seen["num_processes"] == 2
        assert seen["zero_stage"] == 2 and seen["engine_stage"] == 2
        assert seen["model_class"] == "DeepSpeedEngine"
        assert seen["engine_clipping"] == 1.0  # the plugin's default, as Accelerate's
        assert seen["accumulation"] == 1
        assert seen["variable"] == "true"
        assert math.isfinite(seen["loss"])


def test_an_accelerate_deepspeed_config_file(tmp_path: Path) -> None:
    (tmp_path / "cfg.yaml").write_text(CONFIG)
    banner, records = _launch(tmp_path, "--config_file", "cfg.yaml")
    assert "2 process(es) x 1 machine(s), DeepSpeed (ZeRO stage 1), cpu" in banner, banner
    assert "mixed_precision=no (cfg.yaml)" in banner, banner
    assert "not acted on by nbaccel: deepspeed_config.deepspeed_multinode_launcher" in banner
    for seen in records:
        assert seen["distributed_type"] == "DEEPSPEED" and seen["num_processes"] == 2
        assert seen["zero_stage"] == 1 and seen["engine_stage"] == 1
        assert seen["model_class"] == "DeepSpeedEngine"
        assert seen["engine_clipping"] == 0.5  # the file's gradient_clipping
        assert seen["accumulation"] == 2  # the file's DeepSpeed gradient_accumulation_steps
        assert math.isfinite(seen["loss"])


def test_a_deepspeed_config_file_in_force_reaches_notebook_launcher(tmp_path: Path) -> None:
    """The default config file says DEEPSPEED: a function launched with notebook_launcher
    builds a plain Accelerator() and gets DeepSpeed's engine, stage and clipping from it."""
    (tmp_path / "out").mkdir()
    default = tmp_path / ".cache" / "nbaccel" / "default_config.yaml"
    default.parent.mkdir(parents=True)
    default.write_text(CONFIG)
    (tmp_path / "script.py").write_text(SCRIPT)
    code = (
        "import runpy, sys\n"
        "from nbaccel import notebook_launcher\n"
        "def run(out):\n"
        "    sys.argv = ['script.py', out]\n"
        "    runpy.run_path('script.py')\n"
        "notebook_launcher(run, (sys.argv[1],), start_method='fork', timeout=120)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "out")],
        cwd=tmp_path,
        env=h.cli_environ(tmp_path, TORCH_EXTENSIONS_DIR=deepspeed_ops_folder()),
        capture_output=True,
        text=True,
        timeout=h.TIMEOUT_S,
    )
    assert done.returncode == 0, h.detail(done)
    assert "DeepSpeed (ZeRO stage 1)" in done.stdout + done.stderr, h.detail(done)
    records = [json.loads(p.read_text()) for p in sorted((tmp_path / "out").glob("rank*.json"))]
    assert len(records) == 2, h.detail(done)
    for seen in records:
        assert seen["distributed_type"] == "DEEPSPEED" and seen["engine_stage"] == 1
        assert seen["model_class"] == "DeepSpeedEngine" and seen["engine_clipping"] == 0.5
        assert seen["accumulation"] == 2
