"""The config file's ``fsdp_config`` reaches ``Accelerator()`` in 2 real processes (CPU, gloo):
under ``nbaccel launch``, under ``notebook_launcher`` with a config file in force, and under
Accelerate's own ``accelerate launch`` (its ``FSDP_*`` variables)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import cli_helpers as h
import pytest

from tests.support.paths import pythonpath

pytestmark = pytest.mark.multiprocess

SCRIPT = Path(__file__).resolve().parent / "fsdp_config_script.py"


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]


def _run(command: list[str], home: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    """``command`` in ``home`` (its HOME too, so no config file of the machine is read)."""
    return subprocess.run(
        command,
        cwd=home,
        env=h.cli_environ(home, **extra),
        capture_output=True,
        text=True,
        timeout=h.TIMEOUT_S,
    )


def _same_on_both(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Rank 0's record, after checking that rank 1 saw the same (but for its own weights)."""
    assert len(records) == 2
    first, second = ({k: v for k, v in r.items() if k != "init_sum"} for r in records)
    assert first == second, (first, second)
    assert records[0]["init_sum"] != records[1]["init_sum"]  # each rank built other weights
    return records[0]


def test_the_guides_file_shards_under_nbaccel_launch(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "guide.yaml").write_text(h.GUIDE_YAML)
    done = h.nbaccel(
        "launch", "--config_file", "guide.yaml", str(SCRIPT), str(tmp_path / "out"), home=tmp_path
    )
    assert done.returncode == 0, h.detail(done)
    banner = done.stderr.splitlines()[0]
    assert (
        "FSDP (version 1, FULL_SHARD, TRANSFORMER_BASED_WRAP [BertLayer], SHARDED_STATE_DICT, "
        "offload params dropped (CPU run), RAM-efficient loading), cpu" in banner
    ), banner
    seen = _same_on_both(_records(tmp_path / "out"))
    assert seen["start_sum"] == pytest.approx(seen["init_sum"])  # sync_module_states: rank 0's
    assert seen["distributed_type"] == "FSDP"
    assert seen["model_class"] == "FullyShardedDataParallel"
    assert seen["sharding_strategy"] == "FULL_SHARD"  # fsdp_sharding_strategy: 1
    assert seen["wrapped"] == ["BertLayer", "BertLayer"]  # TRANSFORMER_BASED_WRAP, BertLayer
    assert seen["backward_prefetch"] == "BACKWARD_PRE"  # fsdp_backward_prefetch_policy
    assert seen["forward_prefetch"] is False and seen["use_orig_params"] is True
    assert seen["sync_module_states"] is True and seen["ram_efficient_loading"] is True
    assert seen["ram_variable"].lower() == "true"  # what Transformers reads
    assert seen["offload_params"] is False  # on the CPU, as the banner says
    assert seen["mixed_precision"] == "bf16"
    assert seen["state_dict_type"] == "SHARDED_STATE_DICT"
    assert "pytorch_model_fsdp_0/.metadata" in seen["saved"]
    assert {"pytorch_model_fsdp_0/__0_0.distcp", "pytorch_model_fsdp_0/__1_0.distcp"} <= set(
        seen["saved"]
    )


# The guide's other spellings (fsdp_wrap_policy, min_num_param) and the keys the guide's file
# leaves at their defaults, as the config panel's Save writes them to the default file.
PANEL_YAML = textwrap.dedent(
    """
    compute_environment: LOCAL_MACHINE
    distributed_type: FSDP
    use_cpu: true
    num_processes: 2
    mixed_precision: 'no'
    fsdp_config:
      fsdp_version: 1
      fsdp_sharding_strategy: SHARD_GRAD_OP
      fsdp_wrap_policy: SIZE_BASED_WRAP
      min_num_param: 300
      fsdp_state_dict_type: FULL_STATE_DICT
      fsdp_backward_prefetch: BACKWARD_POST
      fsdp_forward_prefetch: true
      fsdp_use_orig_params: false
      fsdp_sync_module_states: false
      fsdp_activation_checkpointing: true
    """
)


def test_a_config_file_in_force_shards_under_notebook_launcher(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    default = tmp_path / ".cache" / "nbaccel" / "default_config.yaml"
    default.parent.mkdir(parents=True)
    default.write_text(PANEL_YAML)
    code = (
        "import sys\n"
        "from fsdp_config_script import record\n"
        "from nbaccel import notebook_launcher\n"
        "notebook_launcher(record, (sys.argv[1],), start_method='fork', timeout=120)\n"
    )
    path = pythonpath(SCRIPT.parent)  # the program imports fsdp_config_script from this folder
    done = _run([sys.executable, "-c", code, str(tmp_path / "out")], tmp_path, PYTHONPATH=path)
    assert done.returncode == 0, h.detail(done)
    assert (
        "FSDP (version 1, SHARD_GRAD_OP, SIZE_BASED_WRAP [min_num_params=300], FULL_STATE_DICT, "
        "activation checkpointing)" in done.stdout + done.stderr
    ), h.detail(done)
    seen = _same_on_both(_records(tmp_path / "out"))
    assert seen["start_sum"] != pytest.approx(seen["init_sum"])  # no sync: each rank's shard
    assert seen["distributed_type"] == "FSDP"
    assert seen["model_class"] == "FullyShardedDataParallel"
    assert seen["sharding_strategy"] == "SHARD_GRAD_OP"
    assert seen["wrapped"] == ["Sequential"]  # 544 parameters; each BertLayer has 272 < 300
    assert seen["backward_prefetch"] == "BACKWARD_POST"
    assert seen["forward_prefetch"] is True and seen["use_orig_params"] is False
    assert seen["activation_checkpointing"] is True and seen["checkpointed"] >= 1
    assert seen["state_dict_type"] == "FULL_STATE_DICT"
    assert "pytorch_model_fsdp.bin" in seen["saved"] or "model.safetensors" in seen["saved"]
    assert not any(name.endswith(".distcp") for name in seen["saved"])


ACCELERATE_YAML = textwrap.dedent(
    """
    compute_environment: LOCAL_MACHINE
    distributed_type: FSDP
    fsdp_config:
      fsdp_version: 2
      fsdp_reshard_after_forward: false
      fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
      fsdp_transformer_layer_cls_to_wrap: BertLayer
      fsdp_state_dict_type: FULL_STATE_DICT
      fsdp_offload_params: false
      fsdp_cpu_ram_efficient_loading: false
    machine_rank: 0
    main_training_function: main
    mixed_precision: 'no'
    num_machines: 1
    num_processes: 2
    rdzv_backend: static
    same_network: true
    use_cpu: false
    """
)


@pytest.mark.skipif(importlib.util.find_spec("accelerate") is None, reason="needs accelerate")
def test_accelerates_own_launcher_and_its_fsdp_variables(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "acc.yaml").write_text(ACCELERATE_YAML)
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", "acc.yaml"]
    done = _run([*launch, str(SCRIPT), str(tmp_path / "out")], tmp_path)
    assert done.returncode == 0, h.detail(done)
    seen = _same_on_both(_records(tmp_path / "out"))
    assert seen["distributed_type"] == "FSDP"
    assert seen["model_class"] == "FSDPTinyBert"  # FSDP2's fully_shard
    assert seen["wrapped"] == ["FSDPBertLayer", "FSDPBertLayer"]
    assert seen["reshard_after_forward"] is False
    assert seen["state_dict_type"] == "FULL_STATE_DICT"
    assert not any(name.endswith(".distcp") for name in seen["saved"])
