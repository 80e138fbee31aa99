"""One rule for FSDP: a process that no launcher started trains without it (as Accelerate
does), a launched process shards. Plain scripts in fresh interpreters (the plugin given, and a
config file in force that says FSDP), a launched job of one process (torchrun's variables),
and 2 real gloo ranks from ``notebook_launcher``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import cli_helpers as h
import fsdp_alone_script
import pytest

from nbaccel import notebook_launcher

pytestmark = pytest.mark.multiprocess

SCRIPT = Path(fsdp_alone_script.__file__).resolve()
ASIDE = "started on its own (no launcher), so it trains without FSDP"


def _script(home: Path, *args: str, **extra: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=home,
        env=h.cli_environ(home, **extra),
        capture_output=True,
        text=True,
        timeout=h.TIMEOUT_S,
    )
    assert done.returncode == 0, h.detail(done)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _trained(seen: dict[str, Any]) -> bool:
    return bool(seen["losses"][-1] < seen["losses"][0])


def test_a_plain_script_with_a_plugin_trains_without_fsdp(tmp_path: Path) -> None:
    seen = _script(tmp_path, "plugin", "1")
    assert seen["distributed_type"] == "NO" and seen["plugin"] is None
    assert seen["model_class"] == "Sequential" and seen["group_size"] is None
    assert len(seen["warnings"]) == 1 and ASIDE in seen["warnings"][0]
    assert "fsdp_plugin=" in seen["warnings"][0]
    assert _trained(seen)


def test_a_plain_script_under_a_config_file_that_says_fsdp_trains_without_it(
    tmp_path: Path,
) -> None:
    config = tmp_path / "fsdp.yaml"
    config.write_text(
        "distributed_type: FSDP\nuse_cpu: true\nnum_processes: 2\nmixed_precision: bf16\n"
        "fsdp_config:\n  fsdp_version: 2\n"
    )
    seen = _script(tmp_path, "file", NBACCEL_CONFIG_FILE=str(config))
    assert seen["distributed_type"] == "NO" and seen["plugin"] is None
    assert seen["model_class"] == "Sequential"
    assert seen["mixed_precision"] == "bf16"  # the file's precision applies all the same
    assert len(seen["warnings"]) == 1 and ASIDE in seen["warnings"][0]
    assert str(config) in seen["warnings"][0]
    assert _trained(seen)


@pytest.mark.parametrize("version", ["1", "2"])
def test_a_launched_job_of_one_process_shards_in_a_group_of_one(
    tmp_path: Path, version: str
) -> None:
    """As torchrun starts one process: FSDP joins a process group of one (FSDP1 needs one)."""
    seen = _script(tmp_path, "plugin", version, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    assert seen["distributed_type"] == "FSDP" and seen["plugin"] == int(version)
    assert seen["num_processes"] == 1 and seen["group_size"] == 1
    expected = "FullyShardedDataParallel" if version == "1" else "FSDPSequential"
    assert seen["model_class"] == expected
    assert seen["warnings"] == []
    assert _trained(seen)


def test_two_launched_ranks_still_shard() -> None:
    results = notebook_launcher(
        fsdp_alone_script.record, ("plugin", 2), num_processes=2, start_method="fork", timeout=120
    )
    assert len(results) == 2
    for seen in results:
        assert seen["distributed_type"] == "FSDP" and seen["plugin"] == 2
        assert seen["model_class"] == "FSDPSequential" and seen["group_size"] == 2
        assert seen["warnings"] == []
        assert _trained(seen)
    assert results[0]["losses"] == results[1]["losses"]  # one model, sharded over both
