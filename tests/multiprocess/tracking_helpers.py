"""Functions the tracking tests run in real workers, and readers for what trackers wrote."""

from __future__ import annotations

import json
import logging
import struct
import sys
import time
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from nbaccel import Accelerator, LoggerType
from nbaccel.logging import get_logger
from nbaccel.tracking import GeneralTracker, on_main_process, progress

_A = Accelerator  # tracking is one of the Accelerator's parts (nbaccel.training.tracking)


LOSSES = [1.0, 0.5, 0.25]
CONFIG = {"lr": 0.01, "optimizer": "adamw", "epochs": 3}


class Recorder(GeneralTracker):
    """A user tracker that records what the Accelerator asks of it."""

    name = "recorder"
    requires_logging_directory = False

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Any] = []

    @property
    def tracker(self) -> list[Any]:
        return self.calls

    def start(self) -> None:
        self.calls.append("start")

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.calls.append(("config", dict(values)))

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.calls.append(("log", dict(values), step, kwargs))

    def finish(self) -> None:
        self.calls.append("finish")


class EveryRank(Recorder):
    """A user tracker that wants every process."""

    name = "every"
    main_process_only = False


def _logging_to(order_file: str) -> logging.Logger:
    logging.basicConfig(stream=sys.stdout, format="LOG %(message)s", level=logging.INFO, force=True)
    handler = logging.FileHandler(order_file)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logging.getLogger().addHandler(handler)
    return logging.getLogger()


def tracking_run(project_dir: str, order_file: str) -> dict[str, Any]:
    """One launch checks trackers, the logger, accelerator.print and the progress bars."""
    recorder, every = Recorder(), EveryRank()
    acc = _A(log_with=["jsonl", LoggerType.TENSORBOARD, recorder, every], project_dir=project_dir)
    acc.init_trackers("proj", config=CONFIG)
    for step, loss in enumerate(LOSSES):
        acc.log(
            {"loss": loss, "note": f"step {step}"},
            step=step,
            log_kwargs={"recorder": {"tag": "x"}},
        )
    writer = acc.get_tracker("tensorboard", unwrap=True)
    blank = acc.get_tracker("jsonl")
    acc.end_training()
    try:
        _A(log_with="comet_ml", project_dir=project_dir).init_trackers("missing")
        missing = "no error"
    except ImportError as exc:
        missing = str(exc)

    _logging_to(order_file)
    logger = get_logger("tracking-test", log_level="INFO")
    logger.info("main only from rank %d", acc.process_index)
    if acc.is_main_process:
        time.sleep(0.5)  # without the turns, rank 1 would write first
    logger.info("in order from rank %d", acc.process_index, in_order=True)
    acc.print("printed once")
    for _ in tqdm(range(4), disable=not acc.is_local_main_process, desc="seedbar"):
        time.sleep(0.01)
    for _ in progress(range(5), acc, desc="helperbar"):
        time.sleep(0.01)
    sys.stdout.flush()
    return {
        "rank": acc.process_index,
        "recorder": recorder.calls,
        "every": every.calls,
        "trackers": [t.name for t in acc.trackers],
        "writer": type(writer).__name__,
        "blank": repr(blank),
        "missing": missing,
    }


def wandb_run(project_dir: str) -> str | None:
    """Log three steps to an offline wandb run; returns the run directory on rank 0."""
    acc = _A(log_with="wandb", project_dir=project_dir)
    acc.init_trackers("nbaccel-test", config=CONFIG, init_kwargs={"wandb": {"mode": "offline"}})
    for step, loss in enumerate(LOSSES):
        acc.log({"loss": loss}, step=step)
    run = acc.get_tracker("wandb", unwrap=True)
    acc.end_training()
    return str(run.dir) if run is not None else None


def mlflow_run(project_dir: str) -> str | None:
    """Log three steps to an MLflow run in a local store; returns the run id on rank 0."""
    acc = _A(log_with="mlflow", project_dir=project_dir)
    acc.init_trackers("nbaccel-test", config=CONFIG)
    for step, loss in enumerate(LOSSES):
        acc.log({"loss": loss}, step=step)
    active = acc.get_tracker("mlflow", unwrap=True)
    run_id = active.info.run_id if active is not None else None
    acc.end_training()
    return run_id


def _key(item: Any) -> str:
    return str(item.key or "/".join(item.nested_key))


def read_wandb_records(path: Path) -> list[dict[str, Any]]:
    """The history and config records of a ``.wandb`` file (a LevelDB-style log of
    protobuf ``Record`` messages: 7-byte file header, 32 KiB blocks, 7-byte chunk headers)."""
    from wandb.proto import wandb_internal_pb2

    pb: Any = wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    block, pos, chunk, payloads = 32768, 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            break
        chunk += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST
            payloads.append(chunk)
            chunk = b""
    out: list[dict[str, Any]] = []
    for payload in payloads:
        record = pb.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items = record.history.item
            out.append({"history": {_key(i): json.loads(i.value_json) for i in items}})
        elif kind == "config":
            items = record.config.update
            out.append({"config": {_key(i): json.loads(i.value_json) for i in items}})
    return out
