"""TensorBoard tracker: real event files through ``torch.utils.tensorboard`` (or tensorboardX)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import yaml

from .base import OpenedTracker, on_main_process, scalar_value

__all__ = ["TensorBoardTracker"]


def _summary_writer() -> Any:
    if importlib.util.find_spec("tensorboard") is not None:
        # each tracker's package is optional (the tracking extra)
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter
    # each tracker's package is optional (the tracking extra)
    import tensorboardX

    return tensorboardX.SummaryWriter


def _hparam(value: Any) -> Any:
    number = scalar_value(value)
    if number is not None:
        return number
    return value if isinstance(value, str) else str(value)


def _numbers(key: str, group: dict[str, Any]) -> dict[str, float]:
    out = {}
    for name, value in group.items():
        number = scalar_value(value)
        if number is None:
            raise TypeError(
                f"TensorBoardTracker: {key!r}[{name!r}] is a {type(value).__name__}; "
                "a dict logged to TensorBoard must hold numbers."
            )
        out[str(name)] = float(number)
    return out


class TensorBoardTracker(OpenedTracker):
    """Writes TensorBoard event files to ``{logging_dir}/{run_name}``.

    Numbers become scalars, strings text, dicts ``add_scalars`` groups; the configuration
    becomes hyperparameters (HParams tab, same run) and ``hparams.yml``.

    Args:
        run_name: the project name given to ``init_trackers``.
        logging_dir: the Accelerator's ``logging_dir``.
        **kwargs: passed to ``SummaryWriter``.
    """

    name = "tensorboard"
    requires_logging_directory = True
    main_process_only = True
    opened_attribute = "writer"
    writer: Any

    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str], **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.logging_dir = Path(logging_dir) / run_name
        self.writer_kwargs = kwargs

    @on_main_process
    def start(self) -> None:
        """Open the ``SummaryWriter``."""
        self.writer = _summary_writer()(str(self.logging_dir), **self.writer_kwargs)

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Record ``values`` as hyperparameters in this run and in ``hparams.yml``."""
        writer = self.opened()
        clean = {str(k): _hparam(v) for k, v in values.items()}
        try:
            # each tracker's package is optional (the tracking extra)
            from torch.utils.tensorboard.summary import hparams

            for summary in hparams(clean, {}):
                writer.file_writer.add_summary(summary)
        except ImportError:  # tensorboardX: its own add_hparams
            writer.add_hparams(clean, metric_dict={}, name=".")
        writer.flush()
        self.logging_dir.mkdir(parents=True, exist_ok=True)
        with open(self.logging_dir / "hparams.yml", "w", encoding="utf-8") as handle:
            yaml.safe_dump(clean, handle)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Write ``values`` at ``step``; ``kwargs`` go to the ``add_*`` calls."""
        writer = self.opened()
        for key, value in values.items():
            number = scalar_value(value)
            if number is not None:
                writer.add_scalar(key, number, global_step=step, **kwargs)
            elif isinstance(value, str):
                writer.add_text(key, value, global_step=step, **kwargs)
            elif isinstance(value, dict):
                writer.add_scalars(key, _numbers(key, value), global_step=step, **kwargs)
            else:
                raise TypeError(
                    f"TensorBoardTracker cannot log {key!r} of type {type(value).__name__}; "
                    "log numbers, strings or dicts of numbers."
                )
        writer.flush()

    @on_main_process
    def finish(self) -> None:
        """Flush and close the writer."""
        if self.writer is not None:
            self.writer.close()
