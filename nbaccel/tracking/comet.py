"""Comet ML tracker (``pip install comet_ml``)."""

from __future__ import annotations

from typing import Any

from .base import OpenedTracker, on_main_process, scalar_value

__all__ = ["CometMLTracker"]


class CometMLTracker(OpenedTracker):
    """Logs to a Comet experiment: ``comet_ml.start(project_name=run_name, **kwargs)``.

    Comet reads its API key from its own configuration (``COMET_API_KEY`` or
    ``~/.comet.config``); pass ``init_kwargs={"comet_ml": {"online": False}}`` for an
    offline experiment.

    Args:
        run_name: the project name given to ``init_trackers``.
        **kwargs: passed to ``comet_ml.start``.
    """

    name = "comet_ml"
    requires_logging_directory = False
    main_process_only = True
    opened_attribute = "writer"
    writer: Any

    def __init__(self, run_name: str, **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.init_kwargs = kwargs

    @on_main_process
    def start(self) -> None:
        """Start the experiment."""
        # each tracker's package is optional (the tracking extra)
        import comet_ml

        starter = getattr(comet_ml, "start", None)
        if starter is not None:
            self.writer = starter(project_name=self.run_name, **self.init_kwargs)
        else:  # older comet_ml
            self.writer = comet_ml.Experiment(project_name=self.run_name, **self.init_kwargs)

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Log ``values`` as the experiment's parameters."""
        writer = self.opened()
        writer.log_parameters(values)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Numbers as metrics, strings as "others", dicts as metric groups."""
        writer = self.opened()
        if step is not None:
            writer.set_step(step)
        for key, value in values.items():
            number = scalar_value(value)
            if number is not None:
                writer.log_metric(key, number, step=step, **kwargs)
            elif isinstance(value, str):
                writer.log_other(key, value, **kwargs)
            elif isinstance(value, dict):
                writer.log_metrics(value, step=step, **kwargs)

    @on_main_process
    def finish(self) -> None:
        """End the experiment."""
        if self.writer is not None:
            self.writer.end()
