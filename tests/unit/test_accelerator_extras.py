"""The Accelerator's added methods and the refused engines on one process: triggers, joins,
profiling, parallelism config validation, DeepSpeed / Megatron-LM refusals, enum members."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from nbaccel import Accelerator, DistributedType, ParallelismConfig, ProfileKwargs
from nbaccel.testing import reset_state
from nbaccel.utils import (
    DeepSpeedPlugin,
    MegatronLMPlugin,
    TorchTensorParallelPlugin,
    synchronize_rng_states,
)


def test_trigger_on_one_process() -> None:
    accelerator = Accelerator(cpu=True)
    assert accelerator.check_trigger() is False
    accelerator.set_trigger()
    assert accelerator.check_trigger() is True
    assert accelerator.check_trigger() is False


def test_join_and_sync_in_backward_are_plain_blocks_on_one_process() -> None:
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(nn.Linear(2, 1))
    with accelerator.join_uneven_inputs([model], even_batches=False) as joined:
        model(torch.ones(1, 2)).sum().backward()
    assert joined == [model]
    with accelerator.trigger_sync_in_backward(model):
        model(torch.ones(1, 2)).sum().backward()
    assert model.weight.grad is not None


def test_profile_writes_a_chrome_trace(tmp_path: os.PathLike[str]) -> None:
    accelerator = Accelerator(cpu=True, kwargs_handlers=[ProfileKwargs(activities=["cpu"])])
    with accelerator.profile() as profiler:
        torch.ones(4) @ torch.ones(4)
    assert any("aten::" in event.name for event in profiler.events())
    handler = ProfileKwargs(output_trace_dir=os.path.join(tmp_path, "t"), record_shapes=True)
    with accelerator.profile(handler):
        torch.ones(4) * 2
    assert os.listdir(os.path.join(tmp_path, "t")) == ["profile_0.json"]
    with pytest.raises(ValueError, match="Invalid profiler activity"):
        ProfileKwargs(activities=["gpu"])


def test_accelerator_views_without_parallelism() -> None:
    accelerator = Accelerator(cpu=True)
    assert accelerator.parallelism_config is None and accelerator.torch_device_mesh is None
    assert not accelerator.multi_device and not accelerator.is_fsdp2
    assert accelerator.deepspeed_plugin is None and accelerator.fp8_backend == "NO"
    assert accelerator.non_blocking is False and accelerator.use_seedable_sampler is False
    with pytest.raises(RuntimeError, match="parallelism_config"):
        accelerator.data_parallel_rank  # noqa: B018
    with accelerator.maybe_context_parallel():
        pass
    assert not accelerator.verify_device_map(nn.Linear(1, 1))


def test_parallelism_config_sizes_and_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    config = ParallelismConfig(dp_shard_size=2, tp_size=2)
    assert config.total_size == 4 and config.data_parallel_size == 2
    assert config.active_mesh_dims == ["dp_shard", "tp"] and config.fsdp_dim_names == [
        "dp_shard_cp"
    ]
    assert config.tp_handler is not None
    monkeypatch.setenv("PARALLELISM_CONFIG_DP_REPLICATE_SIZE", "3")
    assert ParallelismConfig().dp_replicate_size == 3
    with pytest.raises(ValueError, match="must be an int of at least 1"):
        ParallelismConfig(tp_size=0)
    with pytest.raises(ValueError, match="exclude each other"):
        ParallelismConfig(cp_size=2, sp_size=2)
    with pytest.raises(ValueError, match="pure replication"):
        ParallelismConfig(dp_replicate_size=2, tp_size=2)


def test_accelerator_checks_the_parallelism_config() -> None:
    with pytest.raises(NotImplementedError, match="tensor, context or sequence parallelism"):
        Accelerator(cpu=True, parallelism_config=ParallelismConfig(tp_size=2))
    reset_state()
    with pytest.raises(ValueError, match="does not match the 1 processes"):
        Accelerator(cpu=True, parallelism_config=ParallelismConfig(dp_replicate_size=2))
    reset_state()
    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig())
    assert accelerator.data_parallel_rank == 0 and accelerator.torch_device_mesh is None
    assert accelerator.state.parallelism_config is accelerator.parallelism_config


@pytest.mark.parametrize("plugin", [MegatronLMPlugin, TorchTensorParallelPlugin])
def test_refused_engines_say_what_to_use(plugin: type) -> None:
    with pytest.raises(NotImplementedError, match="FullyShardedDataParallelPlugin"):
        plugin()


def test_deepspeed_plugins_argument_takes_named_plugins_only() -> None:
    with pytest.raises(TypeError, match="dict of named DeepSpeedPlugin objects, got object"):
        Accelerator(cpu=True, deepspeed_plugins={"a": object()})
    with pytest.raises(ValueError, match=r"deepspeed_plugin or deepspeed_plugins.*not both"):
        Accelerator(cpu=True, deepspeed_plugin=DeepSpeedPlugin(), deepspeed_plugins={})


def test_code_that_lists_distributed_types_works() -> None:
    names = [t.name for t in DistributedType]
    for name in ("MULTI_NPU", "MULTI_XPU", "MULTI_HPU", "MULTI_MLU", "MULTI_MUSA", "MULTI_SDAA"):
        assert name in names
    assert DistributedType("MULTI_NEURON") == "MULTI_NEURON"


def test_synchronize_rng_states_on_one_process_keeps_the_state() -> None:
    Accelerator(cpu=True)
    generator = torch.Generator().manual_seed(5)
    before = generator.get_state()
    synchronize_rng_states(["torch", "generator"], generator=generator)
    assert torch.equal(generator.get_state(), before)
    with pytest.raises(ValueError, match="needs the generator"):
        synchronize_rng_states(["generator"])
    with pytest.raises(RuntimeError, match="no hpu device"):
        synchronize_rng_states(["hpu"])


def test_ddp_kwargs_comm_hook_fields() -> None:
    from nbaccel import DDPCommunicationHookType, DistributedDataParallelKwargs

    handler = DistributedDataParallelKwargs(comm_hook="power_sgd", comm_state_option={"a": 1})
    assert handler.comm_hook == DDPCommunicationHookType.POWER_SGD
    assert handler.to_kwargs() == {}  # the hook is registered, not passed to DDP
    assert DistributedDataParallelKwargs(static_graph=True).to_kwargs() == {"static_graph": True}
    with pytest.raises(ValueError, match="comm_wrapper"):
        DistributedDataParallelKwargs(comm_wrapper="power_sgd")
    with pytest.raises(ValueError, match="comm_hook='fp32'"):
        DistributedDataParallelKwargs(comm_hook="fp32")
