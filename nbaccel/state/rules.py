"""Two rules a new AcceleratorState applies before it records its settings.

- **FSDP runs in launched processes only.** A process that a launcher started (its launch
  variables are set: ``notebook_launcher``'s workers, ``nbaccel launch`` with two or more
  processes, ``torchrun``, ``accelerate launch``, ``mpirun``) shards with the FSDP plugin it is
  given or that the launch's settings build, whatever the number of processes; a launched job
  of one process gets a process group of one, which FSDP needs. A process started on its own
  (a plain script, the notebook's kernel, which is also where ``notebook_launcher`` with one
  process runs the function) trains without FSDP, as Accelerate does: the plugin is set aside,
  ``distributed_type`` is ``NO``, and one warning says how to shard. The FSDP settings of a
  config file in force meet the same rule.
- **DeepSpeed runs in launched processes only**, by the same rule and for the same reason
  (its engine needs a process group): a process on its own sets its plugins aside, with one
  warning.
- **fp16 trains only where the device does** (``environment/precision.py``): elsewhere (the
  CPU) ``mixed_precision`` keeps reading ``"fp16"``, as in Accelerate, while training runs in
  full precision (an FSDP plugin without a policy of its own gets a float32 one); the main
  process warns once, unless its launcher already did in the notebook.
"""

from __future__ import annotations

import atexit
import warnings
from typing import Any

import torch.distributed as dist

from ..config.resolve import configured_fsdp
from ..enums import DistributedType
from ..environment import fp16_fallback_warning, precision_in_effect, read_fsdp_launch
from .registry import ProcessRecord, _leave_process_group

__all__ = ["apply_fp16_rule", "deepspeed_plugins_in_use", "fsdp_applies", "fsdp_plugin_in_use"]

# The warnings name the line that built the Accelerator: the rule here (1),
# AcceleratorState.__init__ (2), Accelerator.__init__ (3), the caller (4).
_STACKLEVEL = 4


def fsdp_applies(process: ProcessRecord) -> bool:
    """True when this process may shard with FSDP: a launcher started it (or it is one of
    several processes, or it runs on the XLA device)."""
    return process.distributed_type != DistributedType.NO or process.launch.launched


def fsdp_plugin_in_use(process: ProcessRecord, plugin: Any) -> Any:
    """``plugin`` when FSDP applies to ``process`` (joining a process group of one where the
    launched job has a single process and none exists yet); else None, with one warning when
    FSDP was asked for (the plugin, the launch's settings, or the config file in force)."""
    if fsdp_applies(process):
        if plugin is not None:
            _join_group_of_one(process)
        return plugin
    asked = _where_fsdp_was_asked(plugin)
    if asked is not None:
        warnings.warn(
            f"FSDP was asked for ({asked}), but this process was started on its own (no "
            "launcher), so it trains without FSDP, as in Accelerate: distributed_type is NO, "
            "state.fsdp_plugin is None and prepare() returns the model unsharded (mixed "
            "precision still applies). To shard, run the training function with "
            "notebook_launcher(function, num_processes=2) (or `nbaccel launch`, torchrun).",
            UserWarning,
            stacklevel=_STACKLEVEL,
        )
    return None


def deepspeed_plugins_in_use(
    process: ProcessRecord, plugins: dict[str, Any] | None
) -> dict[str, Any] | None:
    """``plugins`` when DeepSpeed applies to ``process`` (the same rule as FSDP's, joining a
    process group of one where needed); else None, with one warning when it was asked for."""
    if not plugins:
        return None
    if fsdp_applies(process):
        _join_group_of_one(process)
        return plugins
    warnings.warn(
        "DeepSpeed was asked for, but this process was started on its own (no launcher), so "
        "it trains without DeepSpeed: distributed_type is NO and prepare() returns the model "
        "as it is. To train with DeepSpeed, run the training function with "
        "notebook_launcher(function, num_processes=2) (or `nbaccel launch`, torchrun; with "
        "num_processes=1 notebook_launcher runs the function here, in this process).",
        UserWarning,
        stacklevel=_STACKLEVEL,
    )
    return None


def _where_fsdp_was_asked(plugin: Any) -> str | None:
    if plugin is not None:
        return "fsdp_plugin=FullyShardedDataParallelPlugin(...)"
    if read_fsdp_launch() is not None:
        return "the launch's FSDP settings: NBACCEL_FSDP_CONFIG or ACCELERATE_USE_FSDP"
    path = configured_fsdp()
    if path is not None:
        return f"the config file {path} says distributed_type: FSDP"
    return None


def _join_group_of_one(process: ProcessRecord) -> None:
    """A launched job of one process holds no process group (nbaccel joins one for two or
    more); FSDP needs one, so this process joins a group of itself alone, in memory."""
    if process.num_processes != 1 or process.distributed_type == DistributedType.XLA:
        return
    if not dist.is_available() or dist.is_initialized():
        return
    kind = process.device.type
    backend = "gloo"
    accelerator_backend = dist.Backend.default_device_backend_map.get(kind)
    if kind != "cpu" and accelerator_backend is not None:
        backend = f"cpu:gloo,{kind}:{accelerator_backend}"  # CPU offload keeps gloo at hand
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    atexit.register(_leave_process_group)
    process.owns_process_group = True
    process.backend = dist.get_backend()


def apply_fp16_rule(process: ProcessRecord, mixed_precision: str, plugin: Any) -> None:
    """Apply the fp16 rule for a new state: warn once (on the main process, unless the
    launcher warned in the notebook), and keep an FSDP plugin without a policy of its own in
    full precision too (its wrapper would otherwise cast parameters to fp16)."""
    if precision_in_effect(mixed_precision, process.device.type) == mixed_precision:
        return
    keep_fp32 = getattr(plugin, "set_mixed_precision", None)
    if keep_fp32 is not None and getattr(plugin, "mixed_precision_policy", None) is None:
        keep_fp32("fp32")
    if process.process_index == 0 and not process.launch.precision_warned:
        warnings.warn(
            fp16_fallback_warning(process.device.type), UserWarning, stacklevel=_STACKLEVEL
        )
