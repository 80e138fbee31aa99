"""Weights & Biases tracker (``pip install wandb``); offline runs need no account."""

from __future__ import annotations

import os
from typing import Any

from .base import OpenedTracker, on_main_process

__all__ = ["WandBTracker"]


class WandBTracker(OpenedTracker):
    """Logs to a ``wandb`` run: ``wandb.init(project=run_name, dir=logging_dir, **kwargs)``.

    Pass ``init_kwargs={"wandb": {"mode": "offline"}}`` (or set ``WANDB_MODE=offline``
    before launching) to write the run locally only; ``wandb sync`` uploads it later.

    Args:
        run_name: the project name given to ``init_trackers`` (wandb's ``project``).
        logging_dir: where the ``wandb/`` folder goes (default: wandb's choice).
        **kwargs: passed to ``wandb.init`` (``mode``, ``name``, ``entity``, ``tags``, ...).
    """

    name = "wandb"
    requires_logging_directory = False
    main_process_only = True
    opened_attribute = "run"
    run: Any

    def __init__(
        self, run_name: str, logging_dir: str | os.PathLike[str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__()
        self.run_name = run_name
        self.init_kwargs = dict(kwargs)
        if logging_dir is not None:
            self.init_kwargs.setdefault("dir", os.fspath(logging_dir))

    @on_main_process
    def start(self) -> None:
        """``wandb.init``; creates ``dir`` first (wandb wants it to exist)."""
        # each tracker's package is optional (the tracking extra)
        import wandb

        directory = self.init_kwargs.get("dir")
        if directory is not None:
            os.makedirs(directory, exist_ok=True)
        self.run = wandb.init(project=self.run_name, **self.init_kwargs)

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Add ``values`` to the run's config."""
        run = self.opened()
        run.config.update(values, allow_val_change=True)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """``run.log(values, step=step, **kwargs)``."""
        run = self.opened()
        run.log(values, step=step, **kwargs)

    @on_main_process
    def finish(self) -> None:
        """``run.finish()``: the offline run's files are complete after this."""
        if self.run is not None:
            self.run.finish()
