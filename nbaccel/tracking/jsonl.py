"""The built-in tracker that needs no package: one JSON object per ``log`` call, in a file."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import IO, Any

from .base import GeneralTracker, on_main_process, scalar_value

__all__ = ["JSONLTracker"]


def _jsonable(value: Any) -> Any:
    number = scalar_value(value)
    if number is not None:
        return number
    if isinstance(value, (str, type(None))):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    return str(value)


class JSONLTracker(GeneralTracker):
    """Writes ``{logging_dir}/{run_name}/metrics.jsonl``: one line per ``log`` call,
    ``{"step": ..., "time": ..., "values": {...}}``, and ``config.json`` for the run's
    configuration. Read it back with ``pandas.read_json(path, lines=True)`` or ``json``.

    Args:
        run_name: the project name given to ``init_trackers``.
        logging_dir: the Accelerator's ``logging_dir``.
        filename: name of the metrics file.
    """

    name = "jsonl"
    requires_logging_directory = True
    main_process_only = True

    def __init__(
        self, run_name: str, logging_dir: str | os.PathLike[str], filename: str = "metrics.jsonl"
    ) -> None:
        super().__init__()
        self.run_name = run_name
        self.logging_dir = Path(logging_dir) / run_name
        self.path = self.logging_dir / filename
        self._file: IO[str] | None = None

    @property
    def tracker(self) -> IO[str] | None:
        """The open metrics file (None before ``start`` and after ``finish``)."""
        return self._file

    @on_main_process
    def start(self) -> None:
        """Create the run directory and open the metrics file for appending."""
        self.logging_dir.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Write ``config.json`` next to the metrics."""
        self.logging_dir.mkdir(parents=True, exist_ok=True)
        text = json.dumps(_jsonable(dict(values)), indent=2, sort_keys=True)
        (self.logging_dir / "config.json").write_text(text + "\n", encoding="utf-8")

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Append one line with ``values`` at ``step`` (extra keyword arguments are stored
        alongside)."""
        if self._file is None:
            self.start()
        record = {"step": step, "time": time.time(), "values": _jsonable(dict(values))}
        record.update({str(k): _jsonable(v) for k, v in kwargs.items()})
        assert self._file is not None
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    @on_main_process
    def finish(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None
