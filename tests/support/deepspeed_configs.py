"""DeepSpeed configs shaped like the five templates Accelerate ships in its examples
(examples/deepspeed_config_templates: ZeRO-1, ZeRO-2, ZeRO-2 with optimizer offload, ZeRO-3,
ZeRO-3 with optimizer and parameter offload): fp16 on, DeepSpeed's own AdamW and
WarmupDecayLR, and "auto" wherever the templates leave a value to prepare()."""

from __future__ import annotations

from typing import Any

AUTO = "auto"
TEMPLATES = ("zero1", "zero2", "zero2_offload", "zero3", "zero3_offload")


def _zero(stage: int, offload: bool) -> dict[str, Any]:
    section: dict[str, Any] = {
        "stage": stage,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "reduce_bucket_size": AUTO,
    }
    if stage < 3:
        section.update(allgather_partitions=True, allgather_bucket_size=2e8, reduce_scatter=True)
    else:
        section.update(
            stage3_prefetch_bucket_size=AUTO,
            stage3_param_persistence_threshold=AUTO,
            sub_group_size=1e9,
            stage3_max_live_parameters=1e9,
            stage3_max_reuse_distance=1e9,
            stage3_gather_16bit_weights_on_model_save=AUTO,
        )
    if offload:
        section["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if stage == 3:
            section["offload_param"] = {"device": "cpu", "pin_memory": True}
    return section


def template(name: str) -> dict[str, Any]:
    """The config of one template, as a new dict."""
    stage = int(name[4])
    offload = name.endswith("offload")
    adam: dict[str, Any] = {"lr": AUTO, "weight_decay": AUTO}
    if not (stage == 3 and offload):
        adam.update(torch_adam=True, adam_w_mode=True)
    return {
        "fp16": {
            "enabled": True,
            "loss_scale": 0,
            "loss_scale_window": 1000,
            "initial_scale_power": 16,
            "hysteresis": 2,
            "min_loss_scale": 1,
        },
        "optimizer": {"type": "AdamW", "params": adam},
        "scheduler": {
            "type": "WarmupDecayLR",
            "params": {
                "warmup_min_lr": AUTO,
                "warmup_max_lr": AUTO,
                "warmup_num_steps": AUTO,
                "total_num_steps": AUTO,
            },
        },
        "zero_optimization": _zero(stage, offload),
        "gradient_accumulation_steps": 1,
        "gradient_clipping": AUTO,
        "steps_per_print": 2000,
        "train_batch_size": AUTO,
        "train_micro_batch_size_per_gpu": AUTO,
        "wall_clock_breakdown": False,
    }
