"""The Accelerator's tracking part: init_trackers, log, get_tracker, end_training."""

from __future__ import annotations

from typing import Any

from ..launch.events import report_metrics
from ..plugins import ProjectConfiguration
from ..state import AcceleratorState
from ..tracking.base import GeneralTracker, scalar_value
from ..tracking.registry import create_tracker, resolve_log_with

__all__ = ["Tracking"]


def _numbers(values: dict[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in values.items():
        number = scalar_value(value)
        if number is not None:
            out[str(key)] = float(number)
    return out


class Tracking:
    """Experiment tracking for the Accelerator (see ``docs/tracking.md``).

    Owns the trackers this process started and the names of those that run on another
    process. Trackers act on the main process only (a custom tracker with
    ``main_process_only = False`` acts on every process).
    """

    def __init__(
        self, log_with: Any, project_configuration: ProjectConfiguration, state: AcceleratorState
    ) -> None:
        self.log_with = log_with
        self.project_configuration = project_configuration
        self.state = state
        self._trackers: list[GeneralTracker] = []
        self._elsewhere: list[str] = []  # names running on another process

    def _acts_here(self, tracker: GeneralTracker) -> bool:
        return not getattr(tracker, "main_process_only", True) or bool(self.state.is_main_process)

    @property
    def trackers(self) -> list[GeneralTracker]:
        """The trackers started by :meth:`init_trackers` on this process."""
        return self._trackers

    def init_trackers(
        self,
        project_name: str,
        config: dict[str, Any] | None = None,
        init_kwargs: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        """Start the trackers of ``log_with`` for ``project_name``.

        Args:
            project_name: the run's project (TensorBoard/JSONL sub-directory, wandb project,
                MLflow experiment, Comet project).
            config: hyperparameters to record once in every tracker.
            init_kwargs: per tracker name, keyword arguments for its constructor, e.g.
                ``{"wandb": {"mode": "offline", "name": "run-1"}}``.

        Every process checks ``log_with`` (so a missing package fails everywhere alike);
        built-in trackers are created and started on the main process only.
        """
        if not isinstance(project_name, str) or not project_name:
            raise ValueError(f"init_trackers(project_name={project_name!r}) must be a string.")
        if init_kwargs is not None and not isinstance(init_kwargs, dict):
            raise TypeError("init_trackers(init_kwargs=...) must be a dict: tracker name -> dict.")
        if config is not None and not isinstance(config, dict):
            raise TypeError(f"init_trackers(config=...) must be a dict, got {type(config)}.")
        logging_dir = self.project_configuration.logging_dir
        started: list[GeneralTracker] = []
        for item in resolve_log_with(self.log_with, logging_dir):
            if isinstance(item, GeneralTracker):
                tracker = item
            elif not self.state.is_main_process:
                self._elsewhere.append(item)
                continue
            else:
                kwargs = dict((init_kwargs or {}).get(item, {}))
                tracker = create_tracker(item, project_name, logging_dir, kwargs)
            self._trackers.append(tracker)
            started.append(tracker)
        for tracker in started:
            if self._acts_here(tracker):
                tracker.start()
                if config is not None:
                    tracker.store_init_configuration(config)

    def log(
        self,
        values: dict[str, Any],
        step: int | None = None,
        log_kwargs: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        """Log ``values`` at ``step`` to every tracker (on the main process).

        Numeric values also go to the launcher's event channel, so the notebook's dashboard
        can show them (nothing happens there outside a launched worker).

        Args:
            values: name -> number (or string / dict where the tracker supports it).
            step: the step to log at.
            log_kwargs: per tracker name, extra keyword arguments for its ``log``.
        """
        if not isinstance(values, dict):
            raise TypeError(f"log(values=...) must be a dict, got {type(values).__name__}.")
        if self.state.is_main_process:
            numbers = _numbers(values)
            if numbers:
                report_metrics(numbers, step)
        for tracker in self.trackers:
            if self._acts_here(tracker):
                extra = (log_kwargs or {}).get(tracker.name, {})
                tracker.log(values, step=step, **extra)

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """The tracker called ``name`` (``unwrap=True``: the object it wraps, e.g. the
        ``SummaryWriter`` or the wandb run).

        On processes where that tracker does not run: an inert ``GeneralTracker`` (its
        methods do nothing), or None with ``unwrap=True``.
        """
        for tracker in self.trackers:
            if tracker.name == name:
                return tracker.tracker if unwrap else tracker
        if name in self._elsewhere or (not self.trackers and not self.state.is_main_process):
            blank = GeneralTracker(_blank=True)
            return blank.tracker if unwrap else blank
        names = [t.name for t in self.trackers] + self._elsewhere
        hint = "" if names else " Call init_trackers(...) first, with log_with set."
        raise ValueError(f"{name!r} is not one of this Accelerator's trackers {names}.{hint}")

    def end_training(self) -> None:
        """Finish every tracker (flush and close files, end runs). Call it at the end."""
        for tracker in self.trackers:
            if self._acts_here(tracker):
                tracker.finish()
