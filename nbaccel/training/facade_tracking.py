"""The Accelerator's experiment-tracking methods (``docs/tracking.md``): its ``Tracking`` part
answers them.

Each is written out with the part's signature, takes the part's docstring through
``documented_by`` and calls ``self._tracking``, which is declared here with its type, so mypy
checks every call against ``Tracking``.
"""

from __future__ import annotations

from typing import Any

from ..tracking.base import GeneralTracker
from .documented import documented_by
from .tracking import Tracking

__all__ = ["TrackingMethods"]


class TrackingMethods:
    """Base of ``Accelerator``: what it passes on to ``self._tracking``."""

    _tracking: Tracking

    @property
    @documented_by(Tracking.trackers)
    def trackers(self) -> list[GeneralTracker]:
        return self._tracking.trackers

    @documented_by(Tracking.init_trackers)
    def init_trackers(
        self,
        project_name: str,
        config: dict[str, Any] | None = None,
        init_kwargs: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self._tracking.init_trackers(project_name, config, init_kwargs)

    @documented_by(Tracking.log)
    def log(
        self,
        values: dict[str, Any],
        step: int | None = None,
        log_kwargs: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self._tracking.log(values, step, log_kwargs)

    @documented_by(Tracking.get_tracker)
    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        return self._tracking.get_tracker(name, unwrap)

    @documented_by(Tracking.end_training)
    def end_training(self) -> None:
        self._tracking.end_training()
