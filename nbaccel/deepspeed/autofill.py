"""What ``prepare()`` writes into a DeepSpeed config before the engine is built: every
``"auto"`` value from the loaders, the world size, the accumulation steps, the model's hidden
size and the dummy optimizer and scheduler, as Accelerate fills them; and the checks that a
config agrees with what was found (each error names the key)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .dummies import DummyOptim, DummyScheduler
from .plugin import DeepSpeedPlugin

__all__ = ["Found", "check_objects", "fill_auto_values"]

_HIDDEN_KEYS = (
    "zero_optimization.reduce_bucket_size",
    "zero_optimization.stage3_prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold",
)


@dataclass
class Found:
    """What one ``prepare()`` call holds, for the config."""

    batch_sizes: list[int | None]
    split_batches: bool
    num_processes: int
    model: Any = None
    optimizer: Any = None
    scheduler: Any = None


def check_objects(plugin: DeepSpeedPlugin, found: Found) -> None:
    """Refuse an optimizer or scheduler that contradicts the config's own."""
    config = plugin.deepspeed_config
    optimizer, scheduler = found.optimizer, found.scheduler
    if optimizer is not None:
        if "optimizer" in config and not isinstance(optimizer, DummyOptim):
            raise ValueError(
                "The DeepSpeed config names an optimizer and prepare() got one too; remove "
                "'optimizer' from the config, or pass nbaccel.utils.DummyOptim(params) to "
                "prepare()."
            )
        if "optimizer" not in config and isinstance(optimizer, DummyOptim):
            raise ValueError(
                "prepare() got a DummyOptim, but the DeepSpeed config has no 'optimizer' "
                "section for it to stand for; add one, or pass a torch optimizer."
            )
    if scheduler is not None:
        if "scheduler" in config and not isinstance(scheduler, DummyScheduler):
            raise ValueError(
                "The DeepSpeed config names a scheduler and prepare() got one too; remove "
                "'scheduler' from the config, or pass nbaccel.utils.DummyScheduler(optimizer)."
            )
        if (
            "scheduler" not in config
            and isinstance(scheduler, DummyScheduler)
            and scheduler.lr_scheduler_callable is None
        ):
            raise ValueError(
                "prepare() got a DummyScheduler without lr_scheduler_callable, and the DeepSpeed "
                "config has no 'scheduler' section; add one, or give lr_scheduler_callable."
            )
        if isinstance(optimizer, DummyOptim) and not isinstance(scheduler, DummyScheduler):
            raise ValueError(
                "With a DummyOptim, the scheduler given to prepare() must be a DummyScheduler "
                "(DeepSpeed builds the optimizer, so a torch scheduler cannot be tied to it)."
            )


def _micro_batch(plugin: DeepSpeedPlugin, found: Found) -> int | None:
    """The batch size of one process (None when nothing says and nothing is needed)."""
    sizes = found.batch_sizes
    if any(size is None for size in sizes) and plugin.is_auto("train_micro_batch_size_per_gpu"):
        raise ValueError(
            "A data loader given to prepare() has batch_size None (a batch_sampler), so "
            "DeepSpeed's train_micro_batch_size_per_gpu cannot be filled; set it in the "
            "DeepSpeed config."
        )
    known = [s for s in sizes if s is not None]
    if found.split_batches:
        known = [s // found.num_processes for s in known]
    from_loaders = (min(known) if plugin.is_train_batch_min else max(known)) if known else None
    if plugin.is_auto("train_micro_batch_size_per_gpu"):
        if from_loaders is None and found.model is not None:
            raise ValueError(
                "With DeepSpeed, prepare() needs a data loader (with an int batch_size) beside "
                "the model to fill train_micro_batch_size_per_gpu='auto'; pass the loader in "
                "the same prepare() call, or set the value in the DeepSpeed config."
            )
        return from_loaders
    configured = plugin.get_value("train_micro_batch_size_per_gpu")
    if configured is None:  # not in the config: the loaders say (DeepSpeed would guess it)
        return from_loaders
    if from_loaders is not None and configured != from_loaders:
        raise ValueError(
            f"The DeepSpeed config's train_micro_batch_size_per_gpu={configured} contradicts "
            f"the data loader, which gives each process batches of {from_loaders}; set it to "
            f"{from_loaders} or to 'auto'."
        )
    return configured


def _hidden_size_values(plugin: DeepSpeedPlugin, model: Any) -> dict[str, Any]:
    wanted = [key for key in _HIDDEN_KEYS if plugin.is_auto(key)]
    if not wanted:
        return {}
    config = getattr(model, "config", None)
    hidden = getattr(config, "hidden_size", None)
    if hidden is None and getattr(config, "hidden_sizes", None):
        hidden = max(config.hidden_sizes)  # type: ignore[union-attr]
    if not isinstance(hidden, int):
        raise ValueError(
            f"The DeepSpeed config says 'auto' for {', '.join(wanted)}, which is filled from "
            "model.config.hidden_size; this model has none, so give these keys numbers."
        )
    return {
        "zero_optimization.reduce_bucket_size": hidden * hidden,
        "zero_optimization.stage3_prefetch_bucket_size": int(0.9 * hidden * hidden),
        "zero_optimization.stage3_param_persistence_threshold": 10 * hidden,
    }


def fill_auto_values(plugin: DeepSpeedPlugin, found: Found, accumulation_steps: int) -> None:
    """Fill the plugin's config for this ``prepare()`` call, and check what was set."""
    check_objects(plugin, found)
    plugin.fill_match(
        "gradient_accumulation_steps",
        must_match=False,
        gradient_accumulation_steps=accumulation_steps,
    )
    steps = plugin.get_value("gradient_accumulation_steps")
    micro = _micro_batch(plugin, found)
    values: dict[str, Any] = {
        "gradient_clipping": 1.0,
        "zero_optimization.stage3_gather_16bit_weights_on_model_save": False,
    }
    if micro is not None:
        total = micro * steps * found.num_processes
        configured = plugin.get_value("train_batch_size")
        if configured not in (None, "auto") and configured != total:
            raise ValueError(
                f"The DeepSpeed config's train_batch_size={configured} contradicts "
                f"train_micro_batch_size_per_gpu ({micro}) x gradient_accumulation_steps "
                f"({steps}) x processes ({found.num_processes}) = {total}; set it to {total} "
                "or to 'auto'."
            )
        values["train_micro_batch_size_per_gpu"] = micro
        values["train_batch_size"] = total
    if found.model is not None:
        values.update(_hidden_size_values(plugin, found.model))
    optimizer, scheduler = found.optimizer, found.scheduler
    if isinstance(optimizer, DummyOptim):
        values["optimizer.params.lr"] = optimizer.lr
        values["optimizer.params.weight_decay"] = optimizer.weight_decay
    if isinstance(scheduler, DummyScheduler) and scheduler.lr_scheduler_callable is None:
        opt = scheduler.optimizer
        defaults = getattr(opt, "defaults", None)
        max_lr = defaults["lr"] if isinstance(defaults, dict) else getattr(opt, "lr", None)
        values["scheduler.params.warmup_min_lr"] = 0
        values["scheduler.params.warmup_max_lr"] = max_lr
        values["scheduler.params.warmup_num_steps"] = max(1, scheduler.warmup_num_steps)
        if scheduler.total_num_steps is not None:
            total_steps = scheduler.total_num_steps
            if not found.split_batches:
                total_steps = math.ceil(total_steps / found.num_processes)
            values["scheduler.params.total_num_steps"] = total_steps
    if optimizer is not None and not isinstance(optimizer, DummyOptim):
        plugin.deepspeed_config["zero_allow_untested_optimizer"] = True
    plugin.deepspeed_config_process(must_match=False, **values)
