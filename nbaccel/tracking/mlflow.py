"""MLflow tracker (``pip install mlflow``): a local store under the project directory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .base import OpenedTracker, on_main_process, scalar_value

__all__ = ["MLflowTracker", "tracking_uri_for"]

_MAX_PARAMS_PER_BATCH = 100


def tracking_uri_for(logging_dir: str | os.PathLike[str] | None) -> str | None:
    """The MLflow tracking URI for ``logging_dir``: a URI (``http://``, ``sqlite:``,
    ``file:``, ...) as it is, a directory as ``sqlite:///{dir}/mlflow.db``, None as None."""
    if logging_dir is None:
        return None
    text = os.fspath(logging_dir)
    if "://" in text or text.startswith(("sqlite:", "file:", "databricks")):
        return text
    return f"sqlite:///{Path(text).resolve() / 'mlflow.db'}"


class MLflowTracker(OpenedTracker):
    """Logs to an MLflow run. With a ``logging_dir`` the store is the SQLite database
    ``{logging_dir}/mlflow.db`` and artifacts go to ``{logging_dir}/mlartifacts``.

    Args:
        experiment_name: the MLflow experiment (the project name of ``init_trackers``).
        logging_dir: directory of the local store, or a tracking URI.
        run_id: resume this run.
        tags: run tags.
        nested_run: start the run nested in the active one.
        run_name: name of the run.
        description: the run's description.
    """

    name = "mlflow"
    requires_logging_directory = False
    main_process_only = True
    opened_attribute = "active_run"
    active_run: Any

    def __init__(
        self,
        experiment_name: str | None = None,
        logging_dir: str | os.PathLike[str] | None = None,
        run_id: str | None = None,
        tags: dict[str, Any] | None = None,
        nested_run: bool = False,
        run_name: str | None = None,
        description: str | None = None,
    ) -> None:
        super().__init__()
        self.experiment_name = experiment_name
        self.logging_dir = logging_dir
        self.tracking_uri = tracking_uri_for(logging_dir)
        self.run_id = run_id
        self.tags = tags
        self.nested_run = nested_run
        self.run_name = run_name
        self.description = description

    def _experiment_id(self, mlflow: Any) -> str | None:
        if self.experiment_name is None:
            return None
        found = mlflow.get_experiment_by_name(self.experiment_name)
        if found is not None:
            return str(found.experiment_id)
        artifacts = None
        if self.tracking_uri is not None and self.tracking_uri.startswith("sqlite:"):
            artifacts = str(Path(os.fspath(self.logging_dir or ".")).resolve() / "mlartifacts")
        return str(mlflow.create_experiment(self.experiment_name, artifact_location=artifacts))

    @on_main_process
    def start(self) -> None:
        """Set the tracking URI, find or create the experiment, start the run."""
        # each tracker's package is optional (the tracking extra)
        import mlflow

        if self.tracking_uri is not None:
            if self.tracking_uri.startswith("sqlite:"):
                Path(os.fspath(self.logging_dir or ".")).mkdir(parents=True, exist_ok=True)
            mlflow.set_tracking_uri(self.tracking_uri)
        self.active_run = mlflow.start_run(
            run_id=self.run_id,
            experiment_id=self._experiment_id(mlflow),
            run_name=self.run_name,
            nested=self.nested_run,
            tags=self.tags,
            description=self.description,
        )

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Log ``values`` as run parameters (in batches of 100)."""
        # each tracker's package is optional (the tracking extra)
        import mlflow

        self.opened()
        items = [(str(k), str(v)) for k, v in values.items()]
        for first in range(0, len(items), _MAX_PARAMS_PER_BATCH):
            mlflow.log_params(dict(items[first : first + _MAX_PARAMS_PER_BATCH]))

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Log the numeric ``values`` as metrics at ``step`` (other values are skipped)."""
        # each tracker's package is optional (the tracking extra)
        import mlflow

        self.opened()
        metrics = {}
        for key, value in values.items():
            number = scalar_value(value)
            if number is not None:
                metrics[str(key)] = float(number)
        if metrics:
            mlflow.log_metrics(metrics, step=step, **kwargs)

    @on_main_process
    def finish(self) -> None:
        """End the run."""
        # each tracker's package is optional (the tracking extra)
        import mlflow

        if self.active_run is not None:
            mlflow.end_run()
            self.active_run = None
