"""FSDP in a process that no launcher started: set aside, as Accelerate does, whether the
plugin is given or a config file in force asks for it; one warning says how to shard. The
launched cases (a job of one, two ranks) and plain scripts in a fresh interpreter:
tests/multiprocess/test_fsdp_process_on_its_own.py."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import accelerate
import pytest
import torch
import torch.distributed as dist
from torch import nn

from nbaccel import (
    Accelerator,
    AcceleratorState,
    DistributedType,
    FullyShardedDataParallelPlugin,
)

ASIDE = r"started on its own \(no launcher\), so it trains without FSDP"


@pytest.fixture
def accelerate_state() -> Iterator[None]:
    """Accelerate's own state, forgotten before and after the test."""
    accelerate.state.AcceleratorState._reset_state(reset_partial_state=True)
    yield
    accelerate.state.AcceleratorState._reset_state(reset_partial_state=True)


@pytest.fixture(autouse=True)
def _no_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("NBACCEL_CONFIG_FILE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


def _one_step(accelerator: Accelerator, model: nn.Module) -> list[torch.Tensor]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    x = torch.linspace(-1, 1, 24).reshape(6, 4)
    accelerator.backward(prepared(x).pow(2).mean())
    optimizer.step()
    return [p.detach().clone() for p in prepared.parameters()]


def test_a_plugin_is_set_aside_and_the_model_trains_plainly(accelerate_state: None) -> None:
    theirs = accelerate.Accelerator(
        cpu=True, fsdp_plugin=accelerate.FullyShardedDataParallelPlugin()
    )
    with pytest.warns(UserWarning, match=ASIDE) as caught:
        mine = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))
    assert caught[0].filename == __file__  # points at the line that built the Accelerator
    assert "fsdp_plugin=FullyShardedDataParallelPlugin(...)" in str(caught[0].message)
    assert "notebook_launcher(function, num_processes=2)" in str(caught[0].message)
    assert mine.distributed_type.value == theirs.distributed_type.value == "NO"
    assert mine.state.fsdp_plugin is None and mine.is_fsdp2 is False
    model = _model()
    reference = copy.deepcopy(model)
    after = _one_step(mine, model)
    assert type(mine._models[0]) is nn.Sequential and mine._models[0] is model  # unsharded
    assert not dist.is_initialized()  # no process group was needed
    plain = Accelerator(cpu=True)  # the same state: what training without any plugin gives
    for got, expected in zip(after, _one_step(plain, reference), strict=True):
        assert torch.equal(got, expected)


def test_mixed_precision_still_applies_with_the_plugin_set_aside() -> None:
    with pytest.warns(UserWarning, match=ASIDE):
        accelerator = Accelerator(
            cpu=True, mixed_precision="bf16", fsdp_plugin=FullyShardedDataParallelPlugin()
        )
    model = accelerator.prepare(_model())
    seen: list[torch.dtype] = []
    model[0].register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    assert model(torch.ones(2, 4)).dtype == torch.float32 and seen == [torch.bfloat16]


def test_a_config_file_that_says_fsdp_meets_the_same_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "fsdp.yaml"
    path.write_text(
        "distributed_type: FSDP\nnum_processes: 2\nuse_cpu: true\nmixed_precision: bf16\n"
        "fsdp_config:\n  fsdp_version: 2\n  fsdp_state_dict_type: SHARDED_STATE_DICT\n"
    )
    monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(path))
    with pytest.warns(UserWarning, match=ASIDE) as caught:
        accelerator = Accelerator(cpu=True)
    assert f"the config file {path} says distributed_type: FSDP" in str(caught[0].message)
    assert accelerator.distributed_type == DistributedType.NO
    assert accelerator.state.fsdp_plugin is None
    assert accelerator.mixed_precision == "bf16"  # the file's precision applies all the same
    model = _model()
    assert accelerator.prepare(model) is model


def test_accelerates_fsdp_variables_without_a_launcher_meet_the_same_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # as Accelerate's Accelerator leaves it
    monkeypatch.setenv("FSDP_VERSION", "2")
    with pytest.warns(UserWarning, match="the launch's FSDP settings") as caught:
        accelerator = Accelerator(cpu=True)
    assert len([w for w in caught if "FSDP" in str(w.message)]) == 1
    assert accelerator.distributed_type == DistributedType.NO
    assert accelerator.state.fsdp_plugin is None


def test_the_state_alone_sets_every_plugin_aside() -> None:
    with pytest.warns(UserWarning, match=ASIDE):
        state = AcceleratorState(fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))
    assert state.distributed_type == DistributedType.NO
    assert state.fsdp_plugin is None and state.is_fsdp2 is False
    with pytest.warns(UserWarning, match=ASIDE):  # a later one too: nothing to change
        assert AcceleratorState(fsdp_plugin=FullyShardedDataParallelPlugin()).fsdp_plugin is None
    assert not dist.is_initialized()
