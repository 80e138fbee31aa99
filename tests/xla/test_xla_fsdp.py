"""FSDP on the XLA device: refused when the Accelerator is built, with what to do instead."""

from __future__ import annotations

import pytest

from nbaccel import Accelerator, DistributedType, FullyShardedDataParallelPlugin


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (
            {"xla": True, "xla_fsdp_settings": {"compute_dtype": "bfloat16"}},
            "fsdp_config sets xla: true",
        ),
        ({"xla": True, "xla_fsdp_grad_ckpt": True}, "XlaFullyShardedDataParallel"),
        ({}, "torch's FSDP cannot run"),
    ],
)
def test_fsdp_plugins_are_refused_on_the_xla_device(options: dict, says: str) -> None:
    with pytest.raises(NotImplementedError, match="Drop fsdp_plugin") as refused:
        Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(**options))
    assert says in str(refused.value)
    # the refused plugin does not stick: the next Accelerator trains on the XLA path
    accelerator = Accelerator()
    assert accelerator.distributed_type == DistributedType.XLA
    assert accelerator.state.fsdp_plugin is None
