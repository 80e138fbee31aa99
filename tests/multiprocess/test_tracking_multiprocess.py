"""Trackers, the logger and progress bars at 2 real processes (fork, gloo, CPU)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import tracking_helpers as th

from nbaccel import notebook_launcher
from nbaccel.launch.events import MetricsEvent, ProgressEvent

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]


def _launch(function: Any, *args: Any, events: list[Any] | None = None) -> list[Any]:
    sink = events.append if events is not None else None
    return notebook_launcher(function, args, num_processes=2, start_method="fork", on_event=sink)


def _rank_lines(text: str, word: str) -> list[str]:
    return [line for line in re.split(r"[\r\n]", text) if word in line]


@pytest.fixture(scope="module")
def core_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, list[Any], list[Any], str, str, Path]:
    """One launch for the trackers, logger, print and progress checks (shared by the tests)."""
    project = tmp_path_factory.mktemp("tracking")
    order_file = project / "order.log"
    events: list[Any] = []
    capture = pytest.MonkeyPatch()
    import io
    import sys

    out, err = io.StringIO(), io.StringIO()
    capture.setattr(sys, "stdout", out)
    capture.setattr(sys, "stderr", err)
    try:
        results = _launch(th.tracking_run, str(project), str(order_file), events=events)
    finally:
        capture.undo()
    return project, results, events, out.getvalue(), err.getvalue(), order_file


def test_tensorboard_event_files_written_once_and_read_back(core_run: Any) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    project = core_run[0]
    files = sorted(project.rglob("events.out.tfevents.*"))
    assert len(files) == 1, f"expected one event file (main process only), got {files}"
    assert files[0].parent == project / "proj"
    reader = EventAccumulator(str(files[0].parent))
    reader.Reload()
    scalars = [(s.step, s.value) for s in reader.Scalars("loss")]
    print("tensorboard loss:", scalars)
    assert scalars == list(enumerate(th.LOSSES))
    assert "note/text_summary" in reader.Tags()["tensors"]
    from tensorboard.plugins.hparams import plugin_data_pb2

    content = reader.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    hparams = {k: v.string_value or v.number_value for k, v in start.hparams.items()}
    print("tensorboard hparams:", hparams)
    assert hparams == th.CONFIG


def test_jsonl_file_has_one_line_per_log(core_run: Any) -> None:
    project = core_run[0]
    lines = (project / "proj" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    print("jsonl:", [(r["step"], r["values"]) for r in records])
    assert [r["step"] for r in records] == [0, 1, 2]
    assert [r["values"]["loss"] for r in records] == th.LOSSES
    assert records[2]["values"]["note"] == "step 2"
    assert json.loads((project / "proj" / "config.json").read_text()) == th.CONFIG


def test_custom_trackers_main_only_and_every_rank(core_run: Any) -> None:
    results = core_run[1]
    main, other = results
    logs = [c for c in main["recorder"] if c[0] == "log"]
    print("recorder on rank 0:", main["recorder"][:2], f"... {len(logs)} logs ...", "finish")
    assert main["recorder"][0] == "start"
    assert main["recorder"][1] == ("config", th.CONFIG)
    assert [(c[1]["loss"], c[2], c[3]) for c in logs] == [
        (loss, step, {"tag": "x"}) for step, loss in enumerate(th.LOSSES)
    ]
    assert main["recorder"][-1] == "finish"
    assert other["recorder"] == [], "a main_process_only tracker was called on rank 1"
    for result in results:  # main_process_only = False: every rank
        assert len([c for c in result["every"] if c[0] == "log"]) == 3
        assert result["every"][0] == "start" and result["every"][-1] == "finish"
    assert main["trackers"] == ["jsonl", "tensorboard", "recorder", "every"]
    assert other["trackers"] == ["recorder", "every"]
    assert main["writer"] == "SummaryWriter"
    assert other["writer"] == "NoneType" and other["blank"].startswith("<blank GeneralTracker")


def test_log_reaches_the_launcher_event_channel_from_main_only(core_run: Any) -> None:
    events = core_run[2]
    metrics = [e for e in events if isinstance(e, MetricsEvent)]
    print("metrics events:", [(e.rank, e.step, e.values) for e in metrics])
    assert [(e.rank, e.step, e.values) for e in metrics] == [
        (0, step, {"loss": loss}) for step, loss in enumerate(th.LOSSES)
    ]


def test_missing_package_is_a_clear_error_on_every_rank(core_run: Any) -> None:
    for result in core_run[1]:
        assert "pip install comet_ml" in result["missing"], result["missing"]
    print("missing:", core_run[1][0]["missing"])


def test_logger_main_only_and_in_order(core_run: Any) -> None:
    out, order_file = core_run[3], core_run[5]
    once = _rank_lines(out, "LOG main only")
    print("main only:", once)
    assert once == ["[rank0]: LOG main only from rank 0"]
    ordered = order_file.read_text().splitlines()
    ordered = [line for line in ordered if line.startswith("in order")]
    print("in order (file):", ordered)
    assert ordered == ["in order from rank 0", "in order from rank 1"]
    relayed = _rank_lines(out, "LOG in order")
    print("in order (cell output):", relayed)
    assert relayed == ["[rank0]: LOG in order from rank 0", "[rank1]: LOG in order from rank 1"]
    assert _rank_lines(out, "printed once") == ["[rank0]: printed once"]


def test_one_progress_bar_seed_pattern_and_helper(core_run: Any) -> None:
    err, events = core_run[4], core_run[2]
    for desc in ("seedbar", "helperbar"):
        lines = _rank_lines(err, desc)
        print(desc, "lines:", len(lines), "last:", lines[-1] if lines else None)
        assert lines, f"no {desc} output"
        assert all(line.startswith("[rank0]: ") for line in lines), lines
        assert any("100%" in line for line in lines)
    progress = [e for e in events if isinstance(e, ProgressEvent)]
    print("progress events:", [(e.rank, e.n, e.total, e.desc) for e in progress])
    assert progress, "the helper reported no progress"
    assert {e.rank for e in progress} == {0}
    assert (progress[-1].n, progress[-1].total, progress[-1].desc) == (5, 5, "helperbar")


def test_wandb_offline_run_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")  # belt and braces: never the network
    results = _launch(th.wandb_run, str(tmp_path))
    assert results[1] is None, "rank 1 started a wandb run"
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs
    (log_file,) = runs[0].glob("run-*.wandb")
    records = th.read_wandb_records(log_file)
    history = [r["history"] for r in records if "history" in r]
    config: dict[str, Any] = {}
    for r in records:
        config.update(r.get("config", {}))
    print("wandb history:", [(h["_step"], h["loss"]) for h in history], "config:", config)
    assert [(h["_step"], h["loss"]) for h in history] == list(enumerate(th.LOSSES))
    assert {k: config[k] for k in th.CONFIG} == th.CONFIG


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # SQLAlchemy, inside mlflow
def test_mlflow_local_run_read_back(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    results = _launch(th.mlflow_run, str(tmp_path))
    run_id = results[0]
    assert run_id is not None and results[1] is None
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("nbaccel-test")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert [r.info.run_id for r in runs] == [run_id], "expected one run (main process only)"
    history = [(m.step, m.value) for m in client.get_metric_history(run_id, "loss")]
    params = runs[0].data.params
    print("mlflow loss:", history, "params:", params, "status:", runs[0].info.status)
    assert history == list(enumerate(th.LOSSES))
    assert params == {k: str(v) for k, v in th.CONFIG.items()}
    assert runs[0].info.status == "FINISHED"
