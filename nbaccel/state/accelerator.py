"""AcceleratorState: the process state plus precision and the training plugins."""

from __future__ import annotations

from typing import Any

from ..config.resolve import configured_precision
from ..enums import DistributedType, PrecisionType
from ..unsupported import refuse_plugins
from .parallel_view import ParallelismStateMixin
from .partial import PartialState, ProcessView, process_items
from .registry import STATE, AcceleratorRecord, ProcessRecord, current_process, reset_registry
from .rules import apply_fp16_rule, deepspeed_plugins_in_use, fsdp_applies, fsdp_plugin_in_use
from .shared import SharedStateView, StateResetError, record_property

__all__ = ["AcceleratorState"]


def _accelerator_records() -> tuple[AcceleratorRecord, ProcessRecord] | None:
    """The accelerator and process records while both are set up, else None."""
    if STATE.accelerator is None or STATE.process is None:
        return None
    return STATE.accelerator, STATE.process


def _accelerator_items(records: tuple[AcceleratorRecord, ProcessRecord]) -> dict[str, Any]:
    """The state under the names of Accelerate's ``AcceleratorState._shared_state``."""
    record, process = records
    return {
        **process_items(process),
        "_mixed_precision": record.mixed_precision,
        "deepspeed_plugins": record.deepspeed_plugins,
        "device_mesh": getattr(record.parallelism_config, "device_mesh", None),
        "dynamo_plugin": record.dynamo_plugin,
        "fsdp_plugin": record.fsdp_plugin,
        "parallelism_config": record.parallelism_config,
        "torch_tp_plugin": None,
    }


def _reset_accelerator_state() -> None:
    STATE.accelerator = None
    STATE.gradient = None


def _named_plugins(given: Any) -> dict[str, Any] | None:
    """``deepspeed_plugin`` as a dict of named plugins (one plugin is named ``"default"``)."""
    if given is None:
        return None
    if isinstance(given, dict):
        if not given:
            raise ValueError("deepspeed_plugins={} names no plugin; pass at least one.")
        bad = [name for name, p in given.items() if not hasattr(p, "deepspeed_config")]
        if bad or not all(isinstance(name, str) for name in given):
            raise TypeError(
                "deepspeed_plugins must map names (str) to DeepSpeedPlugin objects; "
                f"{', '.join(map(repr, bad or given))} is not one."
            )
        return dict(given)
    if not hasattr(given, "deepspeed_config"):
        raise TypeError(
            f"deepspeed_plugin must be a DeepSpeedPlugin (or a dict of them), got "
            f"{type(given).__name__}."
        )
    return {"default": given}


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
        deepspeed_plugin: a ``DeepSpeedPlugin``, or a dict of named ones (the first is
            selected); in a launched process the job then reports ``DistributedType.DEEPSPEED``
            (a process on its own sets it aside, as FSDP; see ``docs/deepspeed.md``).
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
            torch_tp_plugin=torch_tp_plugin,
            megatron_lm_plugin=megatron_lm_plugin,
        )
        plugins = _named_plugins(deepspeed_plugin)
        if plugins and fsdp_plugin is not None:
            raise ValueError(
                "Both a DeepSpeed plugin and an FSDP plugin were given; they are two ways of "
                "sharding a model, so pass one of them."
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
                deepspeed_plugins=deepspeed_plugins_in_use(process, plugins),
                fsdp_asked=plugin is not None or fsdp_plugin is not None,
                from_accelerator=_from_accelerator,
            )
            if STATE.accelerator.deepspeed_plugins:
                self.select_deepspeed_plugin(next(iter(STATE.accelerator.deepspeed_plugins)))
            return
        self._check_unchanged("mixed_precision", precision, record.mixed_precision)
        if fsdp_applies(process):
            self._check_unchanged("fsdp_plugin", fsdp_plugin, record.fsdp_plugin)
        elif fsdp_plugin is not None:  # set aside like the first one's, with the warning
            fsdp_plugin_in_use(process, fsdp_plugin)
        self._check_unchanged("dynamo_plugin", dynamo_plugin, record.dynamo_plugin)
        if plugins:
            self._add_deepspeed_plugins(plugins)
        record.from_accelerator = record.from_accelerator or _from_accelerator

    def _add_deepspeed_plugins(self, plugins: dict[str, Any]) -> None:
        """A later Accelerator's DeepSpeed plugins join the state's under their names (a
        notebook cell or a pool cell run again builds its engine again) and its first is
        selected; engines built before keep the config they were built with."""
        record = self._record()
        if record.deepspeed_plugins is None:
            raise ValueError(
                "AcceleratorState has already been set up in this process without DeepSpeed; "
                "a later Accelerator cannot turn it on. Pass deepspeed_plugin to the first "
                "Accelerator() created in the process (inside the launched function), or "
                "restart the pool (%nbaccel restart)."
            )
        record.deepspeed_plugins.update(plugins)
        self.select_deepspeed_plugin(next(iter(plugins)))

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

    fsdp_plugin: Any = record_property("_record", "fsdp_plugin", "The FSDP plugin in use, or None.")

    dynamo_plugin: Any = record_property(
        "_record", "dynamo_plugin", "The ``torch.compile`` plugin in use, or None."
    )

    @property
    def is_fsdp2(self) -> bool:
        """True when the FSDP plugin asks for FSDP2 (``fully_shard``)."""
        plugin = self._record().fsdp_plugin
        return plugin is not None and getattr(plugin, "fsdp_version", 1) == 2

    @property
    def deepspeed_plugin(self) -> Any:
        """The selected DeepSpeed plugin, or None when DeepSpeed is not in use."""
        plugins = self._record().deepspeed_plugins or {}
        return next((p for p in plugins.values() if getattr(p, "selected", False)), None)

    @property
    def megatron_lm_plugin(self) -> None:
        """Always None: nbaccel does not run Megatron-LM."""
        return None

    @property
    def torch_tp_plugin(self) -> None:
        """Always None: nbaccel does not run tensor parallelism."""
        return None

    def get_deepspeed_plugin(self, name: str) -> Any:
        """The DeepSpeed plugin given under ``name`` (``deepspeed_plugins={name: plugin}``)."""
        plugins = self._record().deepspeed_plugins
        if not plugins:
            raise ValueError(
                f"get_deepspeed_plugin({name!r}): DeepSpeed is not in use in this process; pass "
                "Accelerator(deepspeed_plugin=...) inside the launched function."
            )
        if name not in plugins:
            raise KeyError(
                f"get_deepspeed_plugin({name!r}): no DeepSpeed plugin has that name; the names "
                f"are {', '.join(map(repr, plugins))}."
            )
        return plugins[name]

    def select_deepspeed_plugin(self, name: str | None = None) -> None:
        """Make the plugin named ``name`` the active one (the next ``prepare()`` builds its
        engine with it); the others are unselected."""
        chosen = self.get_deepspeed_plugin(name)  # type: ignore[arg-type]
        for other in (self._record().deepspeed_plugins or {}).values():
            if other is not chosen:
                other._unselect()
        chosen.select(_from_accelerator_state=True)

    _shared_state = SharedStateView(
        "AcceleratorState", _accelerator_records, _accelerator_items, _reset_accelerator_state
    )

    @staticmethod
    def _reset_state(reset_partial_state: bool = False) -> None:
        """Forget the accelerator state (and the process state with ``reset_partial_state``);
        state objects created before then raise ``AttributeError`` when read."""
        if reset_partial_state:
            reset_registry()
        else:
            _reset_accelerator_state()
