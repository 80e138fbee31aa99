"""notebook_launcher checks every argument before it starts anything; state reaches workers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import launcher_helpers as h
import pytest

from nbaccel import AcceleratorState, PartialState, notebook_launcher
from nbaccel.testing import reset_state

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]

# (keyword arguments, exception type, substrings the message must contain)
BAD_ARGUMENTS: list[tuple[dict[str, Any], type[Exception], tuple[str, ...]]] = [
    ({"num_processes": 0}, ValueError, ("num_processes", "0")),
    ({"num_processes": "2"}, TypeError, ("num_processes", "'2'")),
    ({"num_processes": True}, TypeError, ("num_processes", "True")),
    ({"mixed_precision": "fp32"}, ValueError, ("mixed_precision", "fp32", "bf16")),
    ({"use_port": 70000}, ValueError, ("use_port", "70000")),
    ({"use_port": "abc"}, TypeError, ("use_port", "abc")),
    ({"num_nodes": 2, "node_rank": 2, "use_port": 29500}, ValueError, ("node_rank", "2")),
    ({"num_nodes": 3, "node_rank": 5, "use_port": 29500}, ValueError, ("node_rank", "5")),
    ({"num_nodes": 2, "node_timeout": 0}, ValueError, ("node_timeout", "0")),
    ({"rdzv_backend": "etcd"}, ValueError, ("rdzv_backend", "etcd")),
    ({"rdzv_endpoint": "nohost"}, ValueError, ("rdzv_endpoint", "nohost")),
    ({"start_method": "forkserver"}, ValueError, ("start_method", "forkserver", "spawn")),
    ({"timeout": -1}, ValueError, ("timeout", "-1")),
    ({"monitor_interval": 0}, ValueError, ("monitor_interval", "0")),
    ({"log_line_prefix_template": "[${nope}] "}, ValueError, ("log_line_prefix_template", "nope")),
    ({"max_restarts": -1}, ValueError, ("max_restarts", "-1")),
]


def _ids(case: tuple[dict[str, Any], type[Exception], tuple[str, ...]]) -> str:
    return ",".join(f"{k}={v!r}" for k, v in case[0].items())


@pytest.mark.parametrize("case", BAD_ARGUMENTS, ids=[_ids(c) for c in BAD_ARGUMENTS])
def test_launcher_bad_argument_raises_before_anything_starts(
    case: tuple[dict[str, Any], type[Exception], tuple[str, ...]], tmp_path: Path
) -> None:
    kwargs, kind, words = case
    kwargs = {"num_processes": 2, **kwargs}
    marker = tmp_path / "ran"
    before = h.child_pids()
    with pytest.raises(kind) as info:
        notebook_launcher(lambda: h.touch(marker), **kwargs)
    after = h.child_pids()
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} missing from the message: {message}"
    assert after == before, "a bad argument started processes"
    assert not marker.exists(), "the function ran although an argument was bad"


@pytest.mark.parametrize(
    ("function", "args", "words"),
    [
        (1, (), ("function", "callable", "int")),
        ("train", (), ("function", "callable", "str")),
        (None, 5, ("args", "tuple", "int")),
        (None, "ab", ("args", "tuple", "str")),
        (None, {"lr": 1}, ("args", "tuple", "dict")),
    ],
    ids=["function=1", "function='train'", "args=5", "args='ab'", "args=dict"],
)
def test_launcher_bad_function_or_args_raise_type_error(
    function: Any, args: Any, words: tuple[str, ...], tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    if function is None:

        def function(*_: Any) -> None:
            h.touch(marker)

    before = h.child_pids()
    with pytest.raises(TypeError) as info:
        notebook_launcher(function, args, num_processes=2)
    for word in words:
        assert word in str(info.value), f"{word!r} missing from: {info.value}"
    assert h.child_pids() == before
    assert not marker.exists()


def test_launcher_refuses_an_accelerator_state_in_the_parent(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    AcceleratorState()  # as if the notebook had created an Accelerator at top level
    before = h.child_pids()
    try:
        with pytest.raises(ValueError) as info:
            notebook_launcher(lambda: h.touch(marker), num_processes=2)
        message = str(info.value)
        assert "Accelerator" in message
        assert "inside the function" in message  # says what to do
        assert h.child_pids() == before
        assert not marker.exists()
    finally:
        reset_state()
    assert h.launch(h.local_rank_env) == [0, 1]  # once cleaned up, launching works


def test_launcher_mixed_precision_reaches_both_state_views() -> None:
    assert h.launch(h.precisions, mixed_precision="bf16") == [("bf16", "bf16")] * 2
    assert h.launch(h.precisions, mixed_precision="FP16") == [("fp16", "fp16")] * 2
    assert h.launch(h.precisions) == [("no", "no")] * 2


def test_launcher_banner_names_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    h.launch(h.local_rank_env, mixed_precision="bf16")
    out = capsys.readouterr().out
    banner = [line for line in out.splitlines() if line.startswith("Launching")]
    assert len(banner) == 1, out
    assert "2 processes" in banner[0]
    assert "CPU" in banner[0]
    assert "fork" in banner[0]
    assert "bf16" in banner[0]


# -- point 12: one process runs here -----------------------------------------------------------


def test_launcher_one_process_runs_in_this_process_then_many_still_work() -> None:
    here = os.getpid()
    saved = dict(os.environ)

    def where() -> tuple[int, str, int]:
        state = PartialState()
        return os.getpid(), state.mixed_precision, state.num_processes

    before = h.child_pids()
    assert notebook_launcher(where, num_processes=1, mixed_precision="bf16") == [(here, "bf16", 1)]
    assert h.child_pids() == before
    assert dict(os.environ) == saved, "the in-process run left launch variables behind"
    assert notebook_launcher(lambda x, y=0: x + y, (2,), num_processes=1, kwargs={"y": 3}) == [5]
    infos = h.launch(h.rank_info)
    assert [i["rank"] for i in infos] == [0, 1]
    assert all(i["pid"] != here and i["ppid"] == here for i in infos)
    assert [i["sum"] for i in infos] == [1.0, 1.0]


def test_launcher_one_process_exception_propagates_unchanged() -> None:
    def fail() -> None:
        raise KeyError("in-process")

    with pytest.raises(KeyError, match="in-process"):
        notebook_launcher(fail, num_processes=1)
    assert h.launch(h.local_rank_env) == [0, 1]


def test_launcher_one_process_delivers_events_to_on_event() -> None:
    received: list[object] = []
    assert notebook_launcher(h.send_events, num_processes=1, on_event=received.append) == [True]
    assert {type(e).__name__ for e in received} >= {"ProgressEvent", "MetricsEvent"}


def test_launcher_one_process_honours_max_restarts(tmp_path: Path) -> None:
    attempts = tmp_path / "attempts"

    def flaky() -> int:
        h.touch(attempts)
        restart = PartialState().restart_count
        if restart == 0:
            raise ValueError("first attempt fails")
        return restart

    try:
        assert notebook_launcher(flaky, num_processes=1, max_restarts=1) == [1]
    finally:
        reset_state()
    assert attempts.read_text() == "xx"
