"""Building DeepSpeed's engine, and the wrappers ``prepare()`` hands back around DeepSpeed's
optimizer and scheduler (the engine steps both inside ``Accelerator.backward``)."""

from __future__ import annotations

import atexit
import contextlib
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from ..environment import deepspeed_ops_folder, deepspeed_shm_buffer
from ..optim import AcceleratedOptimizer, AcceleratedScheduler

__all__ = [
    "DeepSpeedEngineWrapper",
    "DeepSpeedOptimizerWrapper",
    "DeepSpeedSchedulerWrapper",
    "get_active_deepspeed_plugin",
    "import_deepspeed",
    "initialize_engine",
    "offload_optimizer",
    "prebuild_ops",
    "share_master_partitions",
]

EXTRA = "pip install 'nbaccel[deepspeed]'"


def import_deepspeed() -> ModuleType:
    """``deepspeed``, or an ``ImportError`` that names the extra to install."""
    try:
        # deepspeed is optional and slow to import: only DeepSpeed runs pay for it
        import deepspeed
    except ImportError as exc:
        raise ImportError(
            f"DeepSpeed is not installed in this environment ({exc}); install it with "
            f"{EXTRA}, then start the training again."
        ) from exc
    return deepspeed


def prebuild_ops(offload: bool = True) -> list[str]:
    """Compile DeepSpeed's CPU ops now (its communication op and, with ``offload``, its CPU
    Adam and Adagrad), once per machine: later engines load them from
    ``~/.cache/torch_extensions`` instead of compiling on their first use. Returns the ops."""
    deepspeed = import_deepspeed()
    builders = ["ShareMemCommBuilder"]
    if offload:
        builders += ["CPUAdamBuilder", "CPUAdagradBuilder"]
    ops = deepspeed.ops.op_builder
    built = []
    for name in builders:
        builder = getattr(ops, name, None)
        if builder is None or not builder().is_compatible(verbose=False):
            continue
        try:
            builder().load(verbose=False)
        except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
            raise _compiler_error(exc) from exc
        built.append(name)
    return built


def offload_optimizer(optimizer: torch.optim.Optimizer) -> Any:
    """DeepSpeed's CPU optimizer for a torch Adam, AdamW or Adagrad, with the same parameter
    groups and hyperparameters (what optimizer offload runs on the CPU); None for another kind
    (DeepSpeed then steps the torch optimizer itself)."""
    import_deepspeed()
    defaults = optimizer.defaults
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        # deepspeed is imported above: its CPU optimizers exist only with it
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        return DeepSpeedCPUAdam(
            optimizer.param_groups,
            lr=defaults["lr"],
            betas=defaults.get("betas", (0.9, 0.999)),
            eps=defaults.get("eps", 1e-8),
            weight_decay=defaults.get("weight_decay", 0),
            adamw_mode=isinstance(optimizer, torch.optim.AdamW),
        )
    if isinstance(optimizer, torch.optim.Adagrad):
        # deepspeed is optional: its CPU Adagrad exists only with it
        from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad

        return DeepSpeedCPUAdagrad(
            optimizer.param_groups,
            lr=defaults["lr"],
            eps=defaults.get("eps", 1e-10),
            weight_decay=defaults.get("weight_decay", 0),
        )
    return None


def _compiler_error(exc: BaseException) -> RuntimeError:
    return RuntimeError(
        "DeepSpeed could not build its C++ ops on this machine (it compiles them the first time "
        f"they run, into {deepspeed_ops_folder()}). Install a C++ compiler and ninja "
        "(Debian/Ubuntu: apt-get install g++; pip install ninja), then start the training "
        f"again. DeepSpeed said: {exc}"
    )


def _build_failure(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, subprocess.CalledProcessError) or any(
        word in text for word in ("building extension", "c++", "compiler", "ninja", "gcc")
    )


def initialize_engine(**kwargs: Any) -> tuple[Any, Any, Any]:
    """``deepspeed.initialize(**kwargs)``: the engine, its optimizer and its scheduler. A
    failure to compile DeepSpeed's communication op on this machine names the compiler."""
    deepspeed = import_deepspeed()
    try:
        engine, optimizer, _, scheduler = deepspeed.initialize(**kwargs)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        if not _build_failure(exc):
            raise
        raise _compiler_error(exc) from exc
    _remove_shm_buffer_at_exit()
    return engine, optimizer, scheduler


_BUFFERS_REMOVED_AT_EXIT: list[Path] = []


def _remove_shm_buffer_at_exit() -> None:
    """DeepSpeed's CPU communication op made this rank's buffer in /dev/shm when the engine's
    process group started (every rank on one machine) and never removes it: remove it when
    this process ends normally, as a script under ``nbaccel launch`` or ``torchrun`` does.
    (A rank that nbaccel's notebook launcher started ends without exit handlers; its launcher
    removes the buffer once the rank has ended, however it ended.)"""
    if _BUFFERS_REMOVED_AT_EXIT:
        return
    # torch.distributed: the engine has just joined its group
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    buffer = deepspeed_shm_buffer(dist.get_rank())
    if buffer is None:
        return
    _BUFFERS_REMOVED_AT_EXIT.append(buffer)
    atexit.register(_remove, buffer)


def _remove(buffer: Path) -> None:
    with contextlib.suppress(OSError):
        buffer.unlink(missing_ok=True)


def share_master_partitions(engine: Any) -> int:
    """Under ZeRO-3, let the optimizer step the parameter shards themselves where they are
    already its master weights (the same dtype on the same device, no offload, no NVMe): one
    copy of the shard instead of two. DeepSpeed means to do this (it keeps one copy when the
    dtype and device agree) but compares a device with its name, so it always keeps two.
    The optimizer's state and parameter groups keep their tensors; only the memory behind
    the second copy is given back. Returns the bytes given back (0 when nothing applies)."""
    zero = getattr(engine, "optimizer", None)
    shards = getattr(zero, "fp16_partitioned_groups_flat", None)
    masters = getattr(zero, "fp32_partitioned_groups_flat", None)
    if not shards or not masters or len(shards) != len(masters):
        return 0
    if getattr(zero, "offload_optimizer", False) or getattr(zero, "offload_param", False):
        return 0
    freed = 0
    for shard, master in zip(shards, masters, strict=True):
        if not (torch.is_tensor(shard) and torch.is_tensor(master)):
            continue
        if (shard.dtype, shard.device, shard.shape) != (master.dtype, master.device, master.shape):
            continue
        if shard.data_ptr() == master.data_ptr() or not shard.is_contiguous():
            continue
        if not torch.equal(shard, master):  # not a copy of the shard: leave both alone
            continue
        freed += master.numel() * master.element_size()
        master.data = shard.data
    return freed


class DeepSpeedEngineWrapper:
    """The engine that ``Accelerator.backward`` drives: backward, then on the last batch of
    an accumulation cycle DeepSpeed's step (clipping, optimizer, scheduler, zeroing)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def backward(self, loss: torch.Tensor, sync_gradients: bool = True, **kwargs: Any) -> None:
        self.engine.set_gradient_accumulation_boundary(is_boundary=sync_gradients)
        self.engine.backward(loss, **kwargs)
        if sync_gradients:
            self.engine.step()

    def get_global_grad_norm(self) -> torch.Tensor | None:
        """The gradients' total norm at the last step (before clipping), as a tensor."""
        norm = self.engine.get_global_grad_norm()
        if norm is None or isinstance(norm, torch.Tensor):
            return norm
        return torch.tensor(float(norm))


class DeepSpeedOptimizerWrapper(AcceleratedOptimizer):
    """DeepSpeed's optimizer as ``prepare()`` returns it: ``step`` and ``zero_grad`` do
    nothing (the engine did both in ``backward``); ``step_was_skipped`` reports an fp16
    overflow."""

    def __init__(self, optimizer: Any) -> None:
        super().__init__(optimizer, device_placement=False, scaler=None)

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        pass  # the engine zeroes gradients after its step

    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        pass  # the engine stepped in Accelerator.backward

    @property
    def step_was_skipped(self) -> bool:
        return bool(getattr(self.optimizer, "overflow", False))

    @step_was_skipped.setter
    def step_was_skipped(self, skipped: bool) -> None:
        pass  # DeepSpeed's optimizer knows

    def __repr__(self) -> str:
        return f"DeepSpeedOptimizerWrapper({type(self.optimizer).__name__})"


class DeepSpeedSchedulerWrapper(AcceleratedScheduler):
    """The scheduler DeepSpeed built or was given: ``step`` does nothing (the engine steps
    it on each optimizer step)."""

    def __init__(self, scheduler: Any, optimizers: Any) -> None:
        listed = list(optimizers) if isinstance(optimizers, (list, tuple)) else [optimizers]
        super().__init__(scheduler, [o for o in listed if o is not None])

    def step(self, *args: Any, **kwargs: Any) -> None:
        pass  # the engine steps the scheduler


def get_active_deepspeed_plugin(state: Any) -> Any:
    """The selected DeepSpeed plugin of ``state`` (an ``AcceleratorState``)."""
    if str(getattr(state, "distributed_type", "")) != "DEEPSPEED":
        raise ValueError(
            "get_active_deepspeed_plugin: DeepSpeed is not in use in this process; create "
            "Accelerator(deepspeed_plugin=...) inside the launched function first."
        )
    return state.deepspeed_plugin
