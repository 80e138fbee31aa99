"""FullyShardedDataParallelPlugin: documented defaults, parsing, and clear refusals."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from torch.distributed.fsdp import (
    BackwardPrefetch,
    MixedPrecision,
    MixedPrecisionPolicy,
    ShardedStateDictConfig,
    ShardingStrategy,
    StateDictType,
)

from nbaccel import FullyShardedDataParallelPlugin as Plugin
from nbaccel.fsdp import fsdp2_switch_optimizer_parameters
from nbaccel.utils import disable_fsdp_ram_efficient_loading, enable_fsdp_ram_efficient_loading


def test_documented_defaults() -> None:
    p = Plugin()
    assert p.fsdp_version == 1 and p.sharding_strategy == ShardingStrategy.FULL_SHARD
    assert p.backward_prefetch is None and p.state_dict_type == StateDictType.FULL_STATE_DICT
    assert p.limit_all_gathers and not p.use_orig_params and not p.sync_module_states
    assert p.param_init_fn is None and p.auto_wrap_policy is None
    assert Plugin(fsdp_version=2).reshard_after_forward is True


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (1, "FULL_SHARD"),
        (2, "SHARD_GRAD_OP"),
        (3, "NO_SHARD"),
        (4, "HYBRID_SHARD"),
        (5, "_HYBRID_SHARD_ZERO2"),
        ("hybrid_shard_zero2", "_HYBRID_SHARD_ZERO2"),
        (ShardingStrategy.NO_SHARD, "NO_SHARD"),
        ("2", "SHARD_GRAD_OP"),
    ],
)
def test_sharding_strategy_spellings_warn_and_map(given: object, expected: str) -> None:
    with pytest.warns(FutureWarning, match="reshard_after_forward"):
        p = Plugin(sharding_strategy=given)
    assert p.reshard_after_forward == ShardingStrategy[expected] == p.sharding_strategy


@pytest.mark.parametrize(
    ("name", "reshard"), [("FULL_SHARD", True), ("SHARD_GRAD_OP", False), ("HYBRID_SHARD", True)]
)
def test_sharding_strategy_maps_to_reshard_for_fsdp2(name: str, reshard: bool) -> None:
    with pytest.warns(FutureWarning):
        assert Plugin(fsdp_version=2, sharding_strategy=name).reshard_after_forward is reshard


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"fsdp_version": 3}, "use 1 or 2"),
        ({"sharding_strategy": 7}, "1-5"),
        ({"reshard_after_forward": True}, "fsdp_version=1"),
        ({"fsdp_version": 2, "reshard_after_forward": "FULL_SHARD"}, "True or False"),
        ({"fsdp_version": 2, "backward_prefetch": "BACKWARD_PRE"}, "FSDP2"),
        ({"fsdp_version": 2, "use_orig_params": True}, "FSDP2"),
        ({"fsdp_version": 2, "forward_prefetch": True}, "FSDP2"),
        ({"fsdp_version": 2, "limit_all_gathers": False}, "FSDP2"),
        ({"fsdp_version": 2, "state_dict_type": "local_state_dict"}, "FSDP2"),
        ({"fsdp_version": 2, "mixed_precision_policy": {"buffer_dtype": "bf16"}}, "buffers"),
        ({"fsdp_version": 2, "mixed_precision_policy": MixedPrecision()}, "MixedPrecisionPolicy"),
        ({"mixed_precision_policy": {"param_dtype": "int8"}}, "not a dtype"),
        ({"auto_wrap_policy": "layer_wrap"}, "transformer_based_wrap"),
        ({"transformer_cls_names_to_wrap": ["Block"]}, "transformer_based_wrap"),
        ({"auto_wrap_policy": "transformer_based_wrap", "min_num_params": 5}, "size_based_wrap"),
        ({"backward_prefetch": "SOMETIMES"}, "BACKWARD_PRE"),
        ({"state_dict_type": "tiny"}, "SHARDED_STATE_DICT"),
        ({"cpu_offload": "yes"}, "CPUOffload"),
        ({"ignored_modules": "("}, "ignored_modules"),
        ({"fsdp_group_size": 0}, ">= 1"),
        ({"sharding_strategy": "FULL_SHARD", "reshard_after_forward": "FULL_SHARD"}, "only"),
    ],
)
def test_refusals_say_why(kwargs: dict, words: str) -> None:
    with warnings.catch_warnings(), pytest.raises(ValueError, match=words):
        warnings.simplefilter("ignore", FutureWarning)
        Plugin(**kwargs)


def test_parsed_values() -> None:
    p = Plugin(
        backward_prefetch="backward_post",
        state_dict_type="sharded_state_dict",
        mixed_precision_policy={"param_dtype": "bf16", "reduce_dtype": torch.float32},
    )
    assert p.backward_prefetch == BackwardPrefetch.BACKWARD_POST
    assert isinstance(p.state_dict_config, ShardedStateDictConfig)
    assert p.mixed_precision_policy == MixedPrecision(torch.bfloat16, torch.float32)
    assert Plugin(backward_prefetch="NO_PREFETCH").backward_prefetch is None


def test_set_state_dict_type_like_the_guide() -> None:
    p = Plugin(state_dict_type="SHARDED_STATE_DICT")
    p.set_state_dict_type("FULL_STATE_DICT")
    assert p.state_dict_type == StateDictType.FULL_STATE_DICT
    assert type(p.state_dict_config).__name__ == "FullStateDictConfig"
    assert p.state_dict_config.rank0_only and p.optim_state_dict_config.offload_to_cpu


def test_set_mixed_precision() -> None:
    p = Plugin()
    p.set_mixed_precision("bf16", buffer_autocast=True)
    assert p.mixed_precision_policy == MixedPrecision(torch.bfloat16, torch.bfloat16, torch.float32)
    p.set_mixed_precision("fp16")  # kept: override=False
    assert p.mixed_precision_policy.param_dtype == torch.bfloat16
    p.set_mixed_precision("fp16", override=True)
    assert p.mixed_precision_policy.param_dtype == torch.float16
    q = Plugin(fsdp_version=2)
    q.set_mixed_precision("bf16")
    assert isinstance(q.mixed_precision_policy, MixedPrecisionPolicy)
    q.validate_mixed_precision_policy()
    with pytest.raises(ValueError, match="fp16"):
        q.set_mixed_precision("int4", override=True)


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)


def test_set_auto_wrap_policy_uses_layer_classes() -> None:
    model = torch.nn.Sequential(Layer(), Layer())
    p = Plugin(auto_wrap_policy="TRANSFORMER_BASED_WRAP", transformer_cls_names_to_wrap="Layer")
    p.set_auto_wrap_policy(model)
    assert p.auto_wrap_policy.keywords["transformer_layer_cls"] == {Layer}
    model._no_split_modules = ["Layer"]  # type: ignore[assignment]
    q = Plugin(auto_wrap_policy="transformer_based_wrap")
    q.set_auto_wrap_policy(model)
    assert q.transformer_cls_names_to_wrap == ["Layer"]
    with pytest.raises(ValueError, match="no module of that class"):
        Plugin(
            auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["BertLayer"]
        ).set_auto_wrap_policy(model)
    s = Plugin(auto_wrap_policy="size_based_wrap")
    s.set_auto_wrap_policy(model)
    assert s.auto_wrap_policy.keywords["min_num_params"] == 100_000_000


def test_ram_efficient_loading_forces_sync_and_sets_the_toggle() -> None:
    disable_fsdp_ram_efficient_loading()
    assert os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] == "False"
    with pytest.warns(UserWarning, match="sync_module_states"):
        p = Plugin(cpu_ram_efficient_loading=True, sync_module_states=False)
    assert p.sync_module_states and p.param_init_fn is not None
    assert os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] == "True"
    enable_fsdp_ram_efficient_loading()
    disable_fsdp_ram_efficient_loading()


def test_from_config_with_the_guides_keys() -> None:
    guide = {
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_backward_prefetch_policy": "BACKWARD_PRE",
        "fsdp_cpu_ram_efficient_loading": False,
        "fsdp_forward_prefetch": False,
        "fsdp_offload_params": True,
        "fsdp_sharding_strategy": 1,
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_sync_module_states": True,
        "fsdp_transformer_layer_cls_to_wrap": "BertLayer",
        "fsdp_use_orig_params": True,
    }
    with warnings.catch_warnings():  # the file's fsdp_sharding_strategy is not deprecated
        warnings.simplefilter("error", FutureWarning)
        p = Plugin.from_config(guide)
    assert p.sharding_strategy == ShardingStrategy.FULL_SHARD and p.cpu_offload.offload_params
    assert p.transformer_cls_names_to_wrap == ["BertLayer"] and p.use_orig_params
    v2 = Plugin.from_config(guide, convert_to_fsdp2=True)
    assert v2.fsdp_version == 2 and v2.reshard_after_forward is True
    size = Plugin.from_config(
        {
            "fsdp_wrap_policy": "SIZE_BASED_WRAP",
            "min_num_param": 2000,
            "xla": True,
            "xla_fsdp_settings": {"xla_fsdp_grad_ckpt": True},
        }
    )
    assert size.min_num_params == 2000 and size.xla and size.xla_fsdp_grad_ckpt
    with pytest.raises(ValueError, match="fsdp_config"):
        Plugin.from_config({"fsdp_sharding_strategy": 9})


def test_fsdp2_switch_optimizer_parameters() -> None:
    old = torch.nn.Parameter(torch.zeros(2))
    new = torch.nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([old], lr=0.1)
    fsdp2_switch_optimizer_parameters(opt, {old.data_ptr(): new})
    assert opt.param_groups[0]["params"][0] is new
    with pytest.raises(KeyError, match="could not be switched"):
        fsdp2_switch_optimizer_parameters(opt, {})
