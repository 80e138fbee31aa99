"""GradientState: when gradients synchronise during gradient accumulation."""

from __future__ import annotations

from typing import Any

from ..environment import read_fsdp_launch
from ..plugins import GradientAccumulationPlugin
from .registry import STATE, GradientRecord
from .shared import SharedStateView, record_property

__all__ = ["GradientState"]


def _gradient_items(record: GradientRecord) -> dict[str, Any]:
    """The record under the names of Accelerate's ``GradientState._shared_state``."""
    return {
        "_is_xla_gradients_synced": record.xla_gradients_synced,
        "plugin_kwargs": record.plugin.to_kwargs(),
        "sync_gradients": record.sync_gradients,
    }


def _reset_gradient_state() -> None:
    STATE.gradient = None


class GradientState:
    """Shared record of gradient synchronisation; all instances see the same values.

    Args:
        gradient_accumulation_plugin: how to accumulate; when given, it replaces the
            settings of an earlier instance (the step counters are kept).
    """

    def __init__(self, gradient_accumulation_plugin: GradientAccumulationPlugin | None = None):
        plugin = gradient_accumulation_plugin
        if plugin is not None and not isinstance(plugin, GradientAccumulationPlugin):
            raise TypeError(
                "GradientState(gradient_accumulation_plugin=...) must be a "
                f"GradientAccumulationPlugin, got {type(plugin).__name__}."
            )
        if STATE.gradient is None:
            STATE.gradient = GradientRecord(plugin=plugin or GradientAccumulationPlugin())
        elif plugin is not None:
            STATE.gradient.plugin = plugin

    _shared_state = SharedStateView(
        "GradientState", lambda: STATE.gradient, _gradient_items, _reset_gradient_state
    )

    @staticmethod
    def _reset_state() -> None:
        """Forget the gradient state (the next GradientState starts from the defaults)."""
        _reset_gradient_state()

    @staticmethod
    def _record() -> GradientRecord:
        if STATE.gradient is None:
            STATE.gradient = GradientRecord(plugin=GradientAccumulationPlugin())
        return STATE.gradient

    @property
    def initialized(self) -> bool:
        """True once a GradientState exists in this process."""
        return STATE.gradient is not None

    @property
    def plugin_kwargs(self) -> dict[str, Any]:
        """The accumulation plugin as a dict."""
        return self._record().plugin.to_kwargs()

    num_steps: int = record_property(
        "_record", "plugin.num_steps", "Batches accumulated per optimizer step."
    )

    adjust_scheduler: bool = record_property(
        "_record",
        "plugin.adjust_scheduler",
        "Whether the scheduler is stepped once per accumulation cycle.",
    )

    sync_with_dataloader: bool = record_property(
        "_record",
        "plugin.sync_with_dataloader",
        "Whether gradients synchronise at the end of each data loader.",
    )

    sync_each_batch: bool = record_property(
        "_record", "plugin.sync_each_batch", "Whether gradients synchronise on every batch."
    )

    @property
    def sync_gradients(self) -> bool:
        """Whether the current step synchronises gradients across processes."""
        return self._record().sync_gradients

    @sync_gradients.setter
    def sync_gradients(self, sync_gradients: bool) -> None:
        self._set_sync_gradients(sync_gradients)

    active_dataloader: Any = record_property(
        "_record", "active_dataloader", "The data loader being iterated, or None."
    )

    @property
    def dataloader_references(self) -> list[Any]:
        """Data loaders being iterated, outermost first (starts as ``[None]``)."""
        return list(self._record().dataloader_references)

    @property
    def in_dataloader(self) -> bool:
        """True while a prepared data loader is being iterated."""
        return self.active_dataloader is not None

    @property
    def end_of_dataloader(self) -> bool:
        """True on the last batch of the active data loader."""
        loader = self.active_dataloader
        return bool(getattr(loader, "end_of_dataloader", False)) if loader is not None else False

    @property
    def remainder(self) -> int:
        """Samples added to the last batch to even it out (-1 when unknown)."""
        loader = self.active_dataloader
        return int(getattr(loader, "remainder", -1)) if loader is not None else -1

    @property
    def is_xla_gradients_synced(self) -> bool:
        """Whether XLA gradients were reduced before the optimizer step; always True under FSDP
        (a plugin given, even where a process on its own sets it aside, or the launch's FSDP
        settings), as in Accelerate."""
        acc = STATE.accelerator
        if acc is not None and (acc.fsdp_plugin is not None or acc.fsdp_asked):
            return True
        if read_fsdp_launch() is not None:
            return True
        return self._record().xla_gradients_synced

    @is_xla_gradients_synced.setter
    def is_xla_gradients_synced(self, value: bool) -> None:
        self._record().xla_gradients_synced = bool(value)

    # The training core drives these; they are not part of the user-facing API.
    def _set_sync_gradients(self, sync_gradients: bool) -> None:
        self._record().sync_gradients = bool(sync_gradients)

    def _add_dataloader(self, dataloader: Any) -> None:
        record = self._record()
        record.active_dataloader = dataloader
        record.dataloader_references.append(dataloader)

    def _remove_dataloader(self, dataloader: Any) -> None:
        record = self._record()
        record.dataloader_references.remove(dataloader)
        record.active_dataloader = record.dataloader_references[-1]

    def __repr__(self) -> str:
        return (
            f"Sync Gradients: {self.sync_gradients}\n"
            f"At end of current dataloader: {self.end_of_dataloader}\n"
            f"Extra samples added: {self.remainder}\n"
            f"Gradient accumulation plugin: {self.plugin_kwargs}\n"
        )
