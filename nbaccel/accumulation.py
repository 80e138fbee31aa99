"""Gradient accumulation: deciding, batch by batch, whether gradients synchronise."""

from __future__ import annotations

from .state import GradientState

__all__ = ["AccumulationCounter"]


class AccumulationCounter:
    """Counts batches and sets ``GradientState.sync_gradients`` for each one.

    Gradients synchronise every ``num_steps`` batches and, with ``sync_with_dataloader``,
    always on the last batch of a data loader (so an epoch never ends mid-accumulation).
    """

    def __init__(self) -> None:
        self.step = 0

    def advance(self) -> bool:
        """Account for one more batch; returns whether this batch synchronises."""
        state = GradientState()
        if state.sync_with_dataloader and state.end_of_dataloader:
            self.step = 0
            sync = True
        else:
            self.step += 1
            sync = self.step % state.num_steps == 0
        state._set_sync_gradients(sync)
        return sync

    def reset(self) -> None:
        """Start counting afresh (after ``free_memory``)."""
        self.step = 0
        GradientState()._set_sync_gradients(True)
