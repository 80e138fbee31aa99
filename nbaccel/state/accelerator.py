"""AcceleratorState: the process state plus precision and the training plugins."""

from __future__ import annotations

from typing import Any, NoReturn

from ..config.resolve import configured_precision
from ..enums import DistributedType, PrecisionType
from ..unsupported import refuse, refuse_plugins
from .parallel_view import ParallelismStateMixin
from .partial import PartialState, ProcessView, process_items
from .registry import STATE, AcceleratorRecord, ProcessRecord, current_process, reset_registry
from .rules import apply_fp16_rule, fsdp_applies, fsdp_plugin_in_use
from .shared import SharedState, StateResetError

__all__ = ["AcceleratorState"]


def _accelerator_items() -> dict[str, Any]:
    """The state under the names of Accelerate's ``AcceleratorState._shared_state``."""
    record = STATE.accelerator
    if record is None or STATE.process is None:
        return {}
    return {
        **process_items(),
        "_mixed_precision": record.mixed_precision,
        "deepspeed_plugins": None,
        "device_mesh": getattr(record.parallelism_config, "device_mesh", None),
        "dynamo_plugin": record.dynamo_plugin,
        "fsdp_plugin": record.fsdp_plugin,
        "parallelism_config": record.parallelism_config,
        "torch_tp_plugin": None,
    }


def _reset_accelerator_state() -> None:
    STATE.accelerator = None
    STATE.gradient = None


class AcceleratorState(ParallelismStateMixin, ProcessView):
    """Everything :class:`PartialState` knows, plus mixed precision and the plugins in use.

    All instances share the state set up by the first one. Create it (or an ``Accelerator``)
    inside the function a launcher runs, not in the notebook's own process.

    Args:
        mixed_precision: ``"no"``, ``"fp16"``, ``"bf16"`` or ``"fp8"``; None takes the
            launcher's choice (``notebook_launcher(mixed_precision=...)``), else the config
            file's (``nbaccel config``; under ``nbaccel launch``, the resolved config), else
            ``"no"``. ``"fp16"`` on a CPU trains in full precision (one warning), as in
            Accelerate, and still reads ``"fp16"``.
        cpu: run on the CPU even when an accelerator is present.
        dynamo_plugin: a :class:`TorchDynamoPlugin` for ``torch.compile``.
        deepspeed_plugin: refused (the error says what to use instead).
        fsdp_plugin: a ``FullyShardedDataParallelPlugin``; in a launched process the job
            then reports ``DistributedType.FSDP``; a process started on its own sets it aside
            (``NO``, as in Accelerate; see ``docs/fsdp.md``).
        torch_tp_plugin: refused (the error says what to use instead).
        megatron_lm_plugin: refused (the error says what to use instead).
        **kwargs: passed to ``torch.distributed.init_process_group``.
    """

    def __init__(
        self,
        mixed_precision: str | None = None,
        cpu: bool = False,
        dynamo_plugin: Any = None,
        deepspeed_plugin: Any = None,
        fsdp_plugin: Any = None,
        torch_tp_plugin: Any = None,
        megatron_lm_plugin: Any = None,
        _from_accelerator: bool = False,
        **kwargs: Any,
    ) -> None:
        refuse_plugins(
            "AcceleratorState",
            deepspeed_plugin=deepspeed_plugin,
            torch_tp_plugin=torch_tp_plugin,
            megatron_lm_plugin=megatron_lm_plugin,
        )
        precision = None
        if mixed_precision is not None:
            precision = str(PrecisionType.parse(mixed_precision, "mixed_precision"))
        PartialState(cpu, **kwargs)
        record = STATE.accelerator
        process = current_process()
        if record is None:
            launch = process.launch
            if precision is None and launch.mixed_precision is None:
                precision = configured_precision()  # the config file in force, if it says
            chosen = precision or launch.mixed_precision or "no"
            plugin = fsdp_plugin_in_use(process, fsdp_plugin)  # None in a process on its own
            apply_fp16_rule(process, chosen, plugin)
            STATE.accelerator = AcceleratorRecord(
                mixed_precision=chosen,
                fsdp_plugin=plugin,
                dynamo_plugin=dynamo_plugin,
                from_accelerator=_from_accelerator,
            )
            return
        self._check_unchanged("mixed_precision", precision, record.mixed_precision)
        if fsdp_applies(process):
            self._check_unchanged("fsdp_plugin", fsdp_plugin, record.fsdp_plugin)
        elif fsdp_plugin is not None:  # set aside like the first one's, with the warning
            fsdp_plugin_in_use(process, fsdp_plugin)
        self._check_unchanged("dynamo_plugin", dynamo_plugin, record.dynamo_plugin)
        record.from_accelerator = record.from_accelerator or _from_accelerator

    @staticmethod
    def _check_unchanged(name: str, asked: Any, current: Any) -> None:
        if asked is not None and asked != current:
            raise ValueError(
                f"AcceleratorState has already been set up in this process with "
                f"{name}={current!r}; it cannot change to {asked!r}. Pass {name} to the first "
                "Accelerator() created in the process (inside the launched function), or call "
                "nbaccel.testing.reset_state() first."
            )

    @property
    def initialized(self) -> bool:
        """True once an AcceleratorState (or Accelerator) has been created in this process."""
        return STATE.accelerator is not None

    def _record(self) -> AcceleratorRecord:
        record = STATE.accelerator
        if record is None:
            raise StateResetError(
                "The nbaccel state was reset after this AcceleratorState was created; create "
                "a new one."
            )
        return record

    def _process(self) -> ProcessRecord:
        self._record()  # an AcceleratorState reads nothing once its own state was reset
        return current_process()

    def _was_reset(self) -> bool:
        return STATE.accelerator is None or STATE.process is None

    @property
    def distributed_type(self) -> DistributedType:
        """The kind of distributed setup in use. Settable, as in Accelerate, whose tests set
        it to reach another setup's code paths: it changes what this state and the
        Accelerator report until the state is reset (``PartialState`` keeps the process's
        own), not how the processes run."""
        chosen = self._record().distributed_type
        return chosen if chosen is not None else super().distributed_type

    @distributed_type.setter
    def distributed_type(self, value: DistributedType | str) -> None:
        kind = DistributedType.parse(value, "AcceleratorState.distributed_type")
        self._record().distributed_type = DistributedType(kind)

    @property
    def fsdp_plugin(self) -> Any:
        """The FSDP plugin in use, or None."""
        return self._record().fsdp_plugin

    @property
    def dynamo_plugin(self) -> Any:
        """The ``torch.compile`` plugin in use, or None."""
        return self._record().dynamo_plugin

    @property
    def is_fsdp2(self) -> bool:
        """True when the FSDP plugin asks for FSDP2 (``fully_shard``)."""
        plugin = self._record().fsdp_plugin
        return plugin is not None and getattr(plugin, "fsdp_version", 1) == 2

    @property
    def deepspeed_plugin(self) -> None:
        """Always None: nbaccel does not run DeepSpeed."""
        return None

    @property
    def megatron_lm_plugin(self) -> None:
        """Always None: nbaccel does not run Megatron-LM."""
        return None

    @property
    def torch_tp_plugin(self) -> None:
        """Always None: nbaccel does not run tensor parallelism."""
        return None

    def get_deepspeed_plugin(self, name: str) -> NoReturn:
        """Refused: raises ``NotImplementedError`` saying what to use instead."""
        refuse("DeepSpeed", f"get_deepspeed_plugin({name!r})")

    def select_deepspeed_plugin(self, name: str | None = None) -> NoReturn:
        """Refused: raises ``NotImplementedError`` saying what to use instead."""
        refuse("DeepSpeed", f"select_deepspeed_plugin({name!r})")

    _shared_state = SharedState("AcceleratorState", _accelerator_items, _reset_accelerator_state)

    @staticmethod
    def _reset_state(reset_partial_state: bool = False) -> None:
        """Forget the accelerator state (and the process state with ``reset_partial_state``);
        state objects created before then raise ``AttributeError`` when read."""
        if reset_partial_state:
            reset_registry()
        else:
            _reset_accelerator_state()
