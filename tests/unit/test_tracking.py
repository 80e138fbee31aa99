"""Trackers in one process: log_with resolution, missing packages, JSON lines, the base class,
the logger and the progress helper."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from nbaccel import Accelerator, LoggerType
from nbaccel.launch.events import ProgressEvent
from nbaccel.logging import MultiProcessAdapter, get_logger
from nbaccel.state.registry import STATE
from nbaccel.tracking import (
    GeneralTracker,
    JSONLTracker,
    available_trackers,
    on_main_process,
    progress,
    resolve_log_with,
)
from nbaccel.tracking import registry as tracker_registry
from nbaccel.tracking.mlflow import tracking_uri_for

_A = Accelerator  # tracking is one of the Accelerator's parts (nbaccel.training.tracking)


class _Mine(GeneralTracker):
    name = "mine"
    requires_logging_directory = False

    def __init__(self) -> None:
        super().__init__()
        self.logged: list[Any] = []

    @property
    def tracker(self) -> list[Any]:
        return self.logged

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.logged.append((values, step))


# --- log_with ------------------------------------------------------------------------------


def test_log_with_accepts_names_enums_lists_all_and_objects(tmp_path: Path) -> None:
    mine = _Mine()
    assert resolve_log_with(None, None) == []
    assert resolve_log_with("TensorBoard", tmp_path) == ["tensorboard"]
    assert resolve_log_with(LoggerType.JSONL, tmp_path) == ["jsonl"]
    assert resolve_log_with(["jsonl", mine, "jsonl"], tmp_path) == ["jsonl", mine]
    everything = resolve_log_with("all", tmp_path)
    assert everything == available_trackers()
    assert {"jsonl", "tensorboard", "wandb", "mlflow"} <= set(everything)
    if importlib.util.find_spec("comet_ml") is None:
        assert "comet_ml" not in everything  # "all" means the installed ones


@pytest.mark.parametrize(
    ("log_with", "error", "words"),
    [
        ("nope", ValueError, ["log_with='nope'", "'tensorboard'", "'jsonl'"]),
        (_Mine, TypeError, ["class _Mine", "instance"]),
        (3, TypeError, ["int"]),
        ("aim", NotImplementedError, ["aim", "GeneralTracker"]),
    ],
)
def test_log_with_bad_values_say_what_is_allowed(
    tmp_path: Path, log_with: Any, error: type[Exception], words: list[str]
) -> None:
    with pytest.raises(error) as info:
        resolve_log_with(log_with, tmp_path)
    for word in words:
        assert word in str(info.value)


def test_file_trackers_need_a_directory() -> None:
    with pytest.raises(ValueError, match="project_dir"):
        _A(log_with="jsonl").init_trackers("p")


def test_comet_missing_is_a_clear_error() -> None:
    if importlib.util.find_spec("comet_ml") is not None:
        pytest.skip("comet_ml is installed here")
    with pytest.raises(ImportError) as info:
        _A(log_with=LoggerType.COMETML).init_trackers("p")
    print(info.value)
    assert "pip install comet_ml" in str(info.value)


@pytest.mark.parametrize(
    ("name", "module"),
    [("tensorboard", "tensorboard"), ("wandb", "wandb"), ("mlflow", "mlflow")],
)
def test_missing_package_error_names_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, module: str
) -> None:
    real = importlib.util.find_spec
    hidden = {module, "tensorboardX"}
    monkeypatch.setattr(
        tracker_registry.importlib.util,
        "find_spec",
        lambda mod, *a: None if mod in hidden else real(mod, *a),
    )
    with pytest.raises(ImportError) as info:
        _A(log_with=[name], project_dir=str(tmp_path)).init_trackers("p")
    assert f"pip install {module}" in str(info.value)
    assert f"log_with={name!r}" in str(info.value)
    assert name not in resolve_log_with("all", tmp_path)


# --- the mixin in one process ----------------------------------------------------------------


def test_jsonl_tracker_and_custom_tracker_in_one_process(tmp_path: Path) -> None:
    mine = _Mine()
    acc = _A(log_with=["jsonl", mine], project_dir=str(tmp_path))
    acc.init_trackers("run", config={"lr": 0.1}, init_kwargs={"jsonl": {"filename": "m.jsonl"}})
    acc.log({"loss": 2.0, "count": 3}, step=7)
    acc.log({"loss": 1.0})
    assert acc.get_tracker("mine", unwrap=True) is mine.logged
    assert isinstance(acc.get_tracker("jsonl"), JSONLTracker)
    acc.end_training()
    lines = [json.loads(x) for x in (tmp_path / "run" / "m.jsonl").read_text().splitlines()]
    assert [(r["step"], r["values"]) for r in lines] == [
        (7, {"loss": 2.0, "count": 3}),
        (None, {"loss": 1.0}),
    ]
    assert json.loads((tmp_path / "run" / "config.json").read_text()) == {"lr": 0.1}
    assert mine.logged == [({"loss": 2.0, "count": 3}, 7), ({"loss": 1.0}, None)]
    with pytest.raises(ValueError, match="'nope' is not one of"):
        acc.get_tracker("nope")
    with pytest.raises(TypeError, match="must be a dict"):
        acc.log([1.0])  # type: ignore[arg-type]


def test_no_log_with_means_no_trackers() -> None:
    acc = _A()
    acc.init_trackers("p")
    acc.log({"loss": 1.0})
    acc.end_training()
    assert acc.trackers == []
    with pytest.raises(ValueError, match="init_trackers"):
        acc.get_tracker("jsonl")


def test_general_tracker_needs_a_name_and_blank_ones_do_nothing() -> None:
    class Nameless(GeneralTracker):
        pass

    with pytest.raises(NotImplementedError, match="name"):
        Nameless()
    blank = GeneralTracker(_blank=True)
    blank.start()
    blank.store_init_configuration({"a": 1})
    blank.log({"a": 1}, step=1)
    blank.finish()
    assert blank.tracker is None


# --- logger ----------------------------------------------------------------------------------


def test_logger_needs_the_state_first() -> None:
    logger = get_logger("nbaccel-test-nostate")
    with pytest.raises(RuntimeError, match="PartialState"):
        logger.info("too early")


def test_logger_logs_on_the_single_process_with_caller_info(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nbaccel import PartialState

    PartialState()
    monkeypatch.setenv("ACCELERATE_LOG_LEVEL", "debug")
    logger = get_logger("nbaccel-test-single")
    assert isinstance(logger, MultiProcessAdapter)
    assert logging.getLogger("nbaccel-test-single").level == logging.DEBUG
    with caplog.at_level(logging.DEBUG, logger="nbaccel-test-single"):
        logger.debug("one %s", "arg")
        logger.info("ordered", in_order=True)
        logger.warning("all", main_process_only=False)
        logger.warning_once("twice")
        logger.warning_once("twice")
    assert [r.getMessage() for r in caplog.records] == ["one arg", "ordered", "all", "twice"]
    assert {r.funcName for r in caplog.records} == {
        "test_logger_logs_on_the_single_process_with_caller_info"
    }


class _Wrapping(logging.LoggerAdapter):
    """A user's wrapper that logs on its caller's behalf (``stacklevel=3``)."""

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["stacklevel"] = 3
        self.logger.log(level, msg, *args, **kwargs)


def _where(adapter: Any, records: list[logging.LogRecord], **kwargs: Any) -> tuple[str, int]:
    line = sys._getframe().f_lineno + 1
    adapter.warning("here", **kwargs)
    record = records[-1]
    return f"{os.path.basename(record.pathname)}:{record.lineno - line}", record.funcName


def test_logger_stacklevel_counts_as_in_accelerate(caplog: pytest.LogCaptureFixture) -> None:
    """``stacklevel`` names the same caller as Accelerate's logger: the default and a
    wrapper's 3 name the line that logged; 1 names the logger itself."""
    from accelerate import PartialState as AcceleratePartialState
    from accelerate.logging import get_logger as accelerate_get_logger

    from nbaccel import PartialState

    PartialState()
    AcceleratePartialState()
    ours, theirs = get_logger("nbaccel-test-stack"), accelerate_get_logger("accelerate-stack")
    here = os.path.basename(__file__)
    with caplog.at_level(logging.WARNING):
        for adapter in (ours, theirs):
            assert _where(adapter, caplog.records) == (f"{here}:0", "_where")
            assert _where(_Wrapping(adapter, {}), caplog.records) == (f"{here}:0", "_where")
            assert _where(adapter, caplog.records, stacklevel=3)[1] == (
                "test_logger_stacklevel_counts_as_in_accelerate"
            )
        assert os.path.basename(_where(ours, caplog.records, stacklevel=1)[0]).startswith(
            "logging.py"
        )


# --- progress --------------------------------------------------------------------------------


def test_progress_reports_through_the_event_channel(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[Any] = []
    monkeypatch.setattr(STATE, "event_sink", events.append)
    from nbaccel import PartialState

    bar = progress(range(4), PartialState(), desc="unit", mininterval=0)
    assert type(bar).__name__ == "TextProgressBar"  # text in launched workers
    assert list(bar) == [0, 1, 2, 3]
    manual = progress(total=3, desc="manual")
    manual.update(2)
    manual.update(1)
    manual.close()
    reports = [(e.n, e.total, e.desc) for e in events if isinstance(e, ProgressEvent)]
    assert reports[-3] == (4, 4, "unit")  # the final report when the loop ends
    assert reports[-1] == (3, 3, "manual")
    hidden = progress(range(2), PartialState(), disable=True)
    before = len(events)
    assert list(hidden) == [0, 1]
    hidden.close()
    assert len(events) == before  # a hidden bar reports nothing


def test_mlflow_store_is_local_under_the_project(tmp_path: Path) -> None:
    assert tracking_uri_for(tmp_path) == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    assert tracking_uri_for("http://localhost:5000") == "http://localhost:5000"
    assert tracking_uri_for(None) is None


def test_text_bars_in_worker_turns_notebook_bars_into_text(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tqdm.notebook

    from nbaccel.tracking.progress import text_bars_in_worker

    # undone after the test: the class's own __new__ comes back
    monkeypatch.setattr(tqdm.notebook.tqdm_notebook, "__new__", tqdm.notebook.tqdm_notebook.__new__)
    assert text_bars_in_worker()
    bar = tqdm.notebook.tqdm(range(2), desc="was-a-widget", display=False)
    assert type(bar) is tqdm.std.tqdm
    assert list(bar) == [0, 1]
    assert "was-a-widget: 100%" in capsys.readouterr().err
